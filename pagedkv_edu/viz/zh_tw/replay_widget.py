"""zh-TW lines of :mod:`pagedkv_edu.viz.replay_widget`: the replay's controls (chapter 6)."""

MESSAGES: dict[str, str] = {
    "play": "播放",
    "step": "步驟",
    "request": "請求",
    "replay of {steps} steps, at step {step}": "重播 {steps} 步，目前在第 {step} 步",
}
