"""zh-TW lines of :mod:`pagedkv_edu.exercises.my_engine`: your engine's parts, yours or shipped, and why."""

MESSAGES: dict[str, str] = {
    "the block manager: admit, grow, release (and fork, chapter 7)":
        "區塊管理器：admit、grow、release（第 7 章再加上分岔 fork）",
    "gathering a sequence's K/V through its block table: the torch attention":
        "經由區塊表收集一條序列的 K/V：torch 版的注意力",
    "the split-K paged decode kernel": "KV 分割的分頁解碼核心",
    "the scheduling policy: schedule(state)": "排程策略：schedule(state)",
    "the prefix cache: the hash chain, the checked lookup, the free queue's order":
        "前綴快取：雜湊鏈、經過檢查的查找，以及空閒佇列的順序",
    "the engine's step, over the parts": "引擎的一步（step），建立在各個部件之上",
    "{path} does not exist (chapter {chapter} writes it)": "{path} 不存在（由第 {chapter} 章寫出）",
    "{path} has not passed chapter {chapter}'s grader yet": "{path} 還沒有通過第 {chapter} 章的評分程式",
    "{path} changed since it passed chapter {chapter}'s grader": "{path} 在通過第 {chapter} 章的評分程式之後又改過了",
    "{path} does not exist: run the %%writefile cell above, which saves your {what} there":
        "{path} 不存在：請執行上方的 %%writefile 儲存格，它會把你的{what}存到那裡",
    "importing {path} {error}": "匯入 {path} 時{error}",
    "{path} defines no function {name}{signature}": "{path} 沒有定義函式 {name}{signature}",
    "{path} imports the shipped {name} instead of defining its own: write yours there":
        "{path} 匯入了隨附的 {name}，而不是自己定義：請在那裡寫出你自己的版本",
    "load_parts() gives it to the engine": "load_parts() 會把它交給引擎",
    "  {path} is marked passed: {passed}, for as long as the file stays as it is":
        "  {path} 已標記為通過：{passed}；只要這個檔案保持不變，就一直如此",
    # the columns of the rows below it: a Chinese character is two columns wide, so are the values 你的 and 隨附
    "part             chapter  runs      lines  why": "部件                章節  執行版本     行數  原因",
    "yours": "你的",
    "shipped": "隨附",
    "your code the engine runs: {count} lines": "引擎執行的程式碼中，你寫的有 {count} 行",
    "{path} passed chapter {chapter}": "{path} 已通過第 {chapter} 章",
    "{path} defines no {names}": "{path} 沒有定義 {names}",
    "your block manager has no swap space: chapter 9 swaps with the shipped one":
        "你的區塊管理器沒有置換空間：第 9 章的置換要用隨附的區塊管理器",
    "your block manager ({path})": "你的區塊管理器（{path}）",
    "{path} defines no BlockManager class built on ManagerBase": "{path} 沒有定義建立在 ManagerBase 之上的 BlockManager 類別",
    "{why} (with fork: shares blocks)": "{why}（已有分岔：會共用區塊）",
    "{why} (no fork yet: chapter 7 adds it; n > 1 needs it)": "{why}（還沒有分岔：第 7 章才會加上；n > 1 需要它）",
    "your prefix cache ({path})": "你的前綴快取（{path}）",
}
