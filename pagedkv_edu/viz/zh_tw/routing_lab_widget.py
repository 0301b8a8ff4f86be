"""zh-TW lines of :mod:`pagedkv_edu.viz.routing_lab_widget`: the routing lab's controls (chapter 11)."""

MESSAGES: dict[str, str] = {
    "workload": "工作負載",
    "arrival rate": "到達率",
    "blocks/replica": "區塊數／副本",
    "Refused, nothing rerun: {reason}": "已拒絕，沒有重跑：{reason}",
    "routing lab: {state}": "路由實驗：{state}",
}
