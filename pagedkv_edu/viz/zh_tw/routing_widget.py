"""zh-TW lines of :mod:`pagedkv_edu.viz.routing_widget`: the routing picture's controls (chapter 11)."""

MESSAGES: dict[str, str] = {
    "routing policy": "路由策略",
    "replicas": "副本數",
    "arrived": "已抵達",
    "routing widget: {policy}, {replicas} replicas, {arrived} requests arrived":
        "路由小工具：{policy}，{replicas} 個副本，已抵達 {arrived} 個請求",
}
