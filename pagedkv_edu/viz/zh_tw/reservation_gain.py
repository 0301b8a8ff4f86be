"""zh-TW lines of :mod:`pagedkv_edu.viz.reservation_gain`: its report (its figure's text is in :mod:`.figures`)."""

MESSAGES: dict[str, str] = {
    "max_seq_len {length:5,}: {fit:2d} reservations fit, contiguous holds {held:4.1f}, paged {paged:.1f}: "
    "{gain:.1f}x":
        "max_seq_len {length:5,}：放得下 {fit:2d} 個預留，連續式容納 {held:4.1f} 個，分頁式 {paged:.1f} 個："
        "{gain:.1f} 倍",
}
