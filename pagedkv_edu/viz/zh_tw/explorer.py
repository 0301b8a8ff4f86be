"""zh-TW lines of :mod:`pagedkv_edu.viz.explorer`: the block-table explorer's controls (chapters 2 and 7)."""

MESSAGES: dict[str, str] = {
    "prompt": "提示詞",
    "add request": "新增請求",
    "admit a request (prefill)": "允入一個請求（預填充）",
    "decode step": "解碼步驟",
    "every request +1 token": "每個請求 +1 個 token",
    "step ×N": "解碼 ×N",
    "N decode steps": "N 個解碼步驟",
    "request": "請求",
    "finish": "結束",
    "return the request's blocks": "歸還這個請求的區塊",
    "fork": "分岔",
    "a new sample sharing the request's blocks": "與這個請求共用區塊的新樣本",
    "block size": "區塊大小",
    "pool blocks": "池中區塊數",
}
