"""zh-TW lines of :mod:`pagedkv_edu.viz.wastes_widget`: the three-wastes widget's controls and messages."""

MESSAGES: dict[str, str] = {
    "reserve": "預留策略",
    "allocator": "配置器",
    "KV budget": "KV 預算",
    "{reason}. The picture still shows the last accepted setting.": "{reason}。圖仍保留上一次被接受的設定。",
    "wastes widget: Orca ({system}), {allocator}, budget {budget:,}, max_seq_len {max_seq_len:,}: {share:.1%} of "
    "the held slots hold tokens":
        "三種浪費小工具：Orca（{system}），{allocator}，預算 {budget:,}，max_seq_len {max_seq_len:,}："
        "佔用的槽位中有 {share:.1%} 存著 token",
}
