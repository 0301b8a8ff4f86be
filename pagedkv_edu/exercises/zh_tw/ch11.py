"""zh-TW lines of :mod:`pagedkv_edu.exercises.ch11`: the hybrid decision of SGLang's cache-aware router."""

MESSAGES: dict[str, str] = {
    "混合路由（hybrid routing）": "混合路由",
    "balanced, a long match wins": "負載平衡，長匹配勝出",
    "balanced, a weak match: the least loaded": "負載平衡，但匹配太弱：選最少負載的副本",
    "imbalanced by both thresholds: the least loaded, despite the match":
        "兩個門檻都超過，負載不平衡：即使有匹配，也選最少負載的副本",
    "over the absolute threshold only: still balanced": "只超過絕對門檻：仍算平衡",
    "over the relative threshold only: still balanced": "只超過相對門檻：仍算平衡",
    "max - min exactly the absolute threshold: balanced": "max - min 恰好等於絕對門檻：算平衡",
    "max exactly rel_threshold x min: balanced": "max 恰好等於 rel_threshold x min：算平衡",
    "match ratio exactly the cache threshold (0.5): too weak": "匹配比例恰好等於快取門檻（0.5）：太弱",
    "idle and nothing cached: any replica": "全部閒置，也沒有任何快取：哪個副本都可以",
    "one replica": "只有一個副本",
    "{workload}, {replicas} replicas, request {request}": "{workload}，{replicas} 個副本，請求 {request}",
    "hidden case {n}": "隱藏案例 {n}",
    "max - min = {difference} > {absolute} and {high} > {rel} x {low}: imbalanced, so the least loaded, "
    "whatever the cache holds":
        "max - min = {difference} > {absolute}，而且 {high} > {rel} x {low}：負載不平衡，所以不論快取裡有什麼，"
        "都選最少負載的副本",
    "max = {high} is exactly {rel} x {low}: not above it; SGLang's test is >, not >=":
        "max = {high} 恰好等於 {rel} x {low}：並沒有超過；SGLang 的判斷是 >，不是 >=",
    "max - min = {difference} is exactly abs_threshold: not above it; SGLang's test is >, not >=":
        "max - min = {difference} 恰好等於 abs_threshold：並沒有超過；SGLang 的判斷是 >，不是 >=",
    "the loads are imbalanced only when both thresholds are exceeded; here {which} does not hold":
        "要兩個門檻都被超過，負載才算不平衡；這裡 {which} 並不成立",
    "the longest match is {best} of {prompt_len} tokens, a ratio exactly the cache threshold {cache}: too weak, so "
    "the least loaded; SGLang tests >, not >=":
        "最長的匹配是 {prompt_len} 個 token 中的 {best} 個，比例恰好等於快取門檻 {cache}：太弱，所以選最少負載的副本；"
        "SGLang 的判斷是 >，不是 >=",
    "the longest match is {best} of {prompt_len} tokens, a ratio not above the cache threshold {cache}: too weak, "
    "so the least loaded":
        "最長的匹配是 {prompt_len} 個 token 中的 {best} 個，比例沒有超過快取門檻 {cache}：太弱，所以選最少負載的副本",
    "loads {loads}, matches {matches} of a {prompt_len}-token prompt, cache_threshold={cache}, "
    "abs_threshold={absolute}, rel_threshold={rel}":
        "負載 {loads}，匹配 {matches}（提示詞共 {prompt_len} 個 token），cache_threshold={cache}，"
        "abs_threshold={absolute}，rel_threshold={rel}",
    "{concept}: got {got}: a replica is a whole-number index": "{concept}：得到 {got}：副本要以整數索引表示",
    "{concept}: got replica {got}, but the replicas are 0..{last}": "{concept}：得到副本 {got}，但副本的編號只有 0..{last}",
    "any of {replicas}": "{replicas} 中的任一個",
    "{concept}: got replica {got}, expected {expected}": "{concept}：得到副本 {got}，應為 {expected}",
    "{concept}: got replica {got}, expected {expected} ({hint})": "{concept}：得到副本 {got}，應為 {expected}（{hint}）",
    "unknown case {case!r}; the cases are: {cases}": "沒有名為 {case!r} 的案例；可用的案例有：{cases}",
}
