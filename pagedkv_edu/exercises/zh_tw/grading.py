"""zh-TW lines of :mod:`pagedkv_edu.exercises.grading`: what every grader shares."""

MESSAGES: dict[str, str] = {
    "{case}:": "{case}：",
    "\"{case}\"": "「{case}」",
    "raised {kind}: {error}, at `{line}`": "引發了 {kind}：{error}，出錯的那一行：`{line}`",
    "raised {kind}: {error}": "引發了 {kind}：{error}",
    "it raises NotImplementedError": "它引發 NotImplementedError",
    "it returns None": "它回傳 None",
    "it returns {value} whatever it is given": "不論給它什麼，它都回傳 {value}",
    "{count} of {total} hidden cases": "{total} 個隱藏案例中的 {count} 個",
    "also wrong: {cases}": "同樣錯誤的還有：{cases}",
    ", ": "、",
    "not solved yet ({why})": "尚未作答（{why}）",
    "({passed} of {total} cases passed before this one; later cases not run)":
        "（在這個案例之前，{total} 個案例中通過了 {passed} 個；之後的案例沒有執行）",
    "{name} ({count} cases)": "{name}（{count} 個案例）",
    "value": "值",
    "expected a flat list of {what}s, got a tensor of shape {shape}": "應為由{what}組成的扁平串列，卻得到形狀為 {shape} 的張量",
    "expected integer {what}s, got a tensor of dtype {dtype} (give it an integer dtype, e.g. torch.long)":
        "應為整數的{what}，卻得到 dtype 為 {dtype} 的張量（請給它整數 dtype，例如 torch.long）",
    "expected a list of {what}s, got {value}": "應為由{what}組成的串列，卻得到 {value}",
    "item {i} is {value}, not a whole-number {what}": "第 {i} 項是 {value}，不是整數的{what}",
    "[] (none)": "[]（沒有）",
}
