"""zh-TW lines of :mod:`pagedkv_edu.viz.block_size_widget`: the block-size widget's controls and messages."""

MESSAGES: dict[str, str] = {
    "block size": "區塊大小",
    "shared prefix": "共享前綴",
    "device": "裝置",
    "Refused: {reason}. The picture still shows the last accepted setting.": "已拒絕：{reason}。圖仍保留上一次被接受的設定。",
    "block-size widget: {summary}": "區塊大小的小工具：{summary}",
}
