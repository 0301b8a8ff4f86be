"""zh-TW lines of :mod:`pagedkv_edu.viz.online_softmax_widget`: the online-softmax widget's controls."""

MESSAGES: dict[str, str] = {
    "tile": "圖塊",
    "tile size": "圖塊大小",
    "splits": "分割",
    "keys": "key 數",
    "seed": "種子",
    "scores": "分數",
}
