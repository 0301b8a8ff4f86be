"""zh-TW lines of :mod:`pagedkv_edu.viz.routing_view`: chapter 11's picture of a routed fleet."""

MESSAGES: dict[str, str] = {
    "{policy}: request {request} ({group}, {tokens} tokens) → replica {chosen}, {hits} tokens found in its cache":
        "{policy}：請求 {request}（{group}，{tokens} 個 token）→ 副本 {chosen}，在它的快取中找到 {hits} 個 token",
    "at {ms:,.0f} ms. Bar: blocks in use (dark), cached and free (teal), free (grey). Squares: waiting (open), "
    "prefilling (filled); then decoding.":
        "時間 {ms:,.0f} ms。長條：使用中的區塊（深色）、已快取的空閒區塊（青綠）、空閒（灰）。"
        "方格：等待中（空心）、預填充中（實心），再來是解碼數。",
    "routing across replicas": "跨副本的路由",
    "replica {index}": "副本 {index}",
    "{served} served": "已服務 {served}",
    "hits {rate:.0%}": "命中率 {rate:.0%}",
    "{used} in use, {cached} cached, of {total} blocks": "共 {total} 個區塊：使用中 {used}，已快取 {cached}",
    "{waiting} waiting +{more} waiting, {decoding} decoding": "等待 {waiting}（+{more}），解碼 {decoding}",
    "{waiting} waiting, {decoding} decoding": "等待中 {waiting}，解碼中 {decoding}",
    "+{count} more cached": "另有 {count} 個已快取",
    "RoutingPicture({policy}, request {request} -> replica {chosen}, served {loads})":
        "RoutingPicture({policy}，請求 {request} -> 副本 {chosen}，已服務 {loads})",
}
