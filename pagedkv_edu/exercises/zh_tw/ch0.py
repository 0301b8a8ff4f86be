"""zh-TW lines of :mod:`pagedkv_edu.exercises.ch0`: KV bytes per token, from a model's config."""

MESSAGES: dict[str, str] = {
    "fp32, one layer, one head": "fp32，一層、一個頭",
    "hidden case {n}": "隱藏案例 {n}",
    "half: did you forget that both K and V are stored?": "只有一半：大概是忘了 K 與 V 兩者都要存",
    "eight times: bits, not bytes?": "八倍：大概是算成了位元，而不是位元組",
    "twice: K and V counted twice?": "兩倍：大概是把 K 與 V 重複算了一次",
    "that counts num_attention_heads ({heads}), the query heads: under grouped-query attention {group} query heads "
    "share one K/V head, and the cache keeps K and V only for the num_key_value_heads ({kv_heads})":
        "這裡算的是 num_attention_heads（{heads}），也就是查詢頭：在分組查詢注意力下，每 {group} 個查詢頭共用一個 "
        "K/V 頭，而快取只為 num_key_value_heads（{kv_heads}）個 KV 頭保存 K 與 V",
    "{group} times too many: {why}": "算成了正確值的 {group} 倍：{why}",
    "elements, not bytes: multiply by bytes_per_element": "算的是元素數，不是位元組數：要再乘上 bytes_per_element",
    "{gqa}; and besides, {also}": "{gqa}；除此之外，{also}",
    "that is elements, not bytes: multiply by bytes_per_element": "這是元素數，不是位元組數：要再乘上 bytes_per_element",
    "{first}; or {second}": "{first}；或者，{second}",
    "got {got}, expected a whole number of bytes ({expected:,})": "得到 {got}，應為整數個位元組（{expected:,}）",
    "{inputs}: got {got:,}, expected {expected:,}": "{inputs}：得到 {got:,}，應為 {expected:,}",
    "{inputs}: got {got:,}, expected {expected:,} ({hint})": "{inputs}：得到 {got:,}，應為 {expected:,}（{hint}）",
}
