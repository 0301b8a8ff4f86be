"""zh-TW lines of :mod:`pagedkv_edu.viz.wastes_view`: the three wastes of a contiguous arena, step by step."""

MESSAGES: dict[str, str] = {
    # the legend (the same words as the figures' catalogue where the chapter's figure uses them)
    "holds tokens": "存著 token",
    "over-reserved (used later)": "過度預留（稍後才用到）",
    "internal fragmentation (never used)": "內部碎片化（永遠用不到）",
    "external fragmentation (holes too small)": "外部碎片化（空洞太小）",
    "free": "空閒",
    "free (not held)": "空閒（未被佔用）",
    "{label}: {share:.1%}": "{label}：{share:.1%}",
    "dashed tick: the paper's figure": "虛線刻度：論文的數字",
    # the allocators, as the control and the titles show them
    "first-fit": "首次適配",
    "buddy": "夥伴配置",
    "first-fit arena": "首次適配配置區",
    "buddy arena": "夥伴配置區",
    # refusals
    "max_seq_len={max_seq_len:,} refused: request {request} reaches {final:,} tokens "
    "({prompt:,} prompt + {output:,} output); raise max_seq_len to at least {final:,}":
        "max_seq_len={max_seq_len:,} 被拒絕：請求 {request} 會長到 {final:,} 個 token"
        "（提示詞 {prompt:,} 個 + 輸出 {output:,} 個）；請把 max_seq_len 調高到至少 {final:,}",
    "the largest block ({room:,} slots) of a {budget:,}-slot buddy arena":
        "這個 {budget:,} 槽位夥伴配置區中最大的區塊（{room:,} 個槽位）",
    "the whole {budget:,}-slot arena": "整個 {budget:,} 槽位的配置區",
    "raise the budget": "請調高預算",
    "raise the budget or lower max_seq_len": "請調高預算，或調低 max_seq_len",
    "KV budget={budget:,} refused: {system} reserves up to {largest:,} slots for one request "
    "(max_seq_len={max_seq_len:,}), more than {space}; {fix}":
        "KV 預算 {budget:,} 被拒絕：{system} 為一個請求最多預留 {largest:,} 個槽位"
        "（max_seq_len={max_seq_len:,}），超過{space}；{fix}",
    # the picture
    "Orca ({system}), {arena} · KV budget {budget:,} slots · max_seq_len {max_seq_len:,} · {requests} requests":
        "Orca（{system}），{arena} · KV 預算 {budget:,} 個槽位 · max_seq_len {max_seq_len:,} · {requests} 個請求",
    "{share:.1%} of the held slots hold tokens; at most {peak} run at once; {steps:,} steps; a request waits "
    "{delay:,.0f} steps on average":
        "佔用的槽位中有 {share:.1%} 存著 token；同時最多執行 {peak} 個請求；共 {steps:,} 步；"
        "請求平均等待 {delay:,.0f} 步",
    "where the KV budget's slots are, step by step": "每一步 KV 預算的槽位用在哪裡",
    "step {step:,}": "第 {step:,} 步",
    "the held slots over the whole run": "整次執行中被佔用的槽位",
    "paper {share:.1%}": "論文 {share:.1%}",
    "Utilisation: the paper's Figure 2": "利用率：論文的圖 2",
    "and this run (indigo)": "以及這次執行（靛藍色）",
    # the still's cells
    "{system}, {allocator}: {share:.1%} hold tokens": "{system}，{allocator}：{share:.1%} 存著 token",
    "budget {budget:,} · max_seq_len {max_seq_len:,} · peak {peak} running · {steps:,} steps":
        "預算 {budget:,} · max_seq_len {max_seq_len:,} · 最多同時執行 {peak} 個 · 共 {steps:,} 步",
}
