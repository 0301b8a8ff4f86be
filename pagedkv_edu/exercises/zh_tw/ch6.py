"""zh-TW lines of :mod:`pagedkv_edu.exercises.ch6`: the admission test and the scheduling policy."""

MESSAGES: dict[str, str] = {
    # can_admit
    "fits with room to spare": "放得下，還有餘裕",
    "41 tokens need 3 blocks, not 2": "41 個 token 需要 3 個區塊，不是 2 個",
    "an exact fit without watermark": "沒有水位線，剛好放得下",
    "an exact fit, but the watermark must stay free": "剛好放得下，但水位線保留的區塊必須維持空閒",
    "the whole pool, nothing running: the watermark does not apply": "用上整個區塊池，但沒有請求在執行：水位線不適用",
    "one block short": "差一個區塊",
    "block size 1": "區塊大小 1",
    "hidden case {n}": "隱藏案例 {n}",
    "({inputs}): got {got}, expected {expected}: the answer is True or False":
        "（{inputs}）：得到 {got}，應為 {expected}：答案必須是 True 或 False",
    "{tokens} tokens at block size {b} take {need} block": "區塊大小為 {b} 時，{tokens} 個 token 佔 {need} 個區塊",
    "{tokens} tokens at block size {b} take {need} blocks": "區塊大小為 {b} 時，{tokens} 個 token 佔 {need} 個區塊",
    "{running} request running": "有 {running} 個請求在執行",
    "{running} requests running": "有 {running} 個請求在執行",
    "({inputs}): got {got}, expected {expected} ({blocks}; {running})":
        "（{inputs}）：得到 {got}，應為 {expected}（{blocks}；{running}）",

    # the shown traces
    "the chapter's pool: 8 blocks of 4, prompts of 7, 8 and 9 tokens":
        "本章的區塊池：8 個區塊、每個 4 個槽位，提示詞分別為 7、8、9 個 token",
    "a token budget of 10: a 25-token prompt is prefilled in chunks beside the decodes":
        "token 預算為 10：一個 25 個 token 的提示詞分塊預填充，旁邊同時有解碼",
    "max_num_seqs=2: the third request waits for a seat": "max_num_seqs=2：第三個請求要等到有空出的座位",
    "a request with n=3 samples takes 3 seats from its admission (max_num_seqs=4)":
        "一個有 n=3 個樣本的請求，從被允入起就佔 3 個座位（max_num_seqs=4）",
    "block size 5, a watermark of 1 block, and preemptions while a queue waits":
        "區塊大小 5、水位線 1 個區塊，並在佇列有請求等待時發生搶佔",

    # what a step saw
    "step {step} (before it: {before})": "第 {step} 步（這一步之前：{before}）",
    "running (oldest first, computed/tokens) [{running}]; waiting [{waiting}]; {free} free blocks of {block_size}; "
    "token budget {budget}, max_num_seqs {seats}, watermark {watermark}":
        "執行中（最舊的在前，已計算/token 數）[{running}]；等待中 [{waiting}]；{free} 個空閒區塊（每個 {block_size} "
        "個槽位）；token 預算 {budget}，max_num_seqs {seats}，水位線 {watermark}",
    "none": "無",
    "{items}, {item}": "{items}、{item}",
    "{seq} ({tokens} tokens)": "{seq}（{tokens} 個 token）",
    "{seq} ({tokens} tokens, n={n})": "{seq}（{tokens} 個 token，n={n}）",
    "{seq} ({tokens} tokens, preempted)": "{seq}（{tokens} 個 token，已被搶佔）",
    "{seq} ({tokens} tokens, n={n}, preempted)": "{seq}（{tokens} 個 token，n={n}，已被搶佔）",

    # what differs, and the rule it breaks
    "{name}: got {got}, expected {expected}": "{name}：得到 {got}，應為 {expected}",
    "scheduled": "排入（scheduled）",
    "preempted": "被搶佔",
    "admitted": "允入（admitted）",
    "failed": "失敗（failed）",
    "tables": "區塊表（tables）",
    "waiting": "等待中",
    "with nothing running, a step that schedules nothing makes the Scheduler fail the head of the queue ({failed}) as "
    "one that can never fit; every request here fits alone: admit it":
        "沒有請求在執行時，一個什麼都沒排入的步驟會讓 Scheduler 把佇列最前面的請求（{failed}）當成永遠放不下的請求，"
        "判定它失敗；這裡的每個請求單獨都放得下：請允入它",
    "a step that preempted admits nobody: memory is short, and the preempted go first next step":
        "發生過搶佔的步驟不允入任何請求：記憶體已經不夠，而被搶佔的請求在下一步優先",
    "grow the running sequences first, then admit: a sequence just admitted must not crowd out the running":
        "先讓執行中的序列成長，再允入：剛被允入的序列不能擠掉執行中的序列",
    "grow the running oldest first, in state.running's order: the plan's order is the batch's":
        "讓執行中的序列從最舊的開始成長，依照 state.running 的順序：計畫的順序就是批次的順序",
    "{seq} could not grow and was the newest: it preempts itself (state.preempt), goes to the front of the queue and "
    "is not scheduled":
        "{seq} 無法成長，而它正是最新的序列：它要搶佔自己（state.preempt），回到佇列最前面，這一步不排入它",
    "preempt only when memory refuses a grow (grow returned None)": "只有在記憶體拒絕成長時（grow 回傳 None）才搶佔",
    "preempt the newest running sequence (state.running[-1], the last admitted); expected {expected} preempted in "
    "that order, got {got}":
        "搶佔最新的執行中序列（state.running[-1]，也就是最後被允入的）；應依序搶佔 {expected}，卻得到 {got}",
    "the head of the queue, {head}, cannot be admitted, so it blocks the ones behind it (first come first served: "
    "nobody starves); you admitted {extra}":
        "佇列最前面的 {head} 無法允入，所以它會擋住排在後面的請求：後面的請求就算區塊夠用，也不能越過它"
        "（先到先服務：不會有請求陷入飢餓）；你卻允入了 {extra}",
    "after step {step} the reference is done; still running or waiting: {left}":
        "第 {step} 步之後，參考實作已經完成；仍在執行或等待的還有：{left}",

    # what the grader saw the policy do
    "leave seq.num_computed_tokens alone: the Scheduler advances it by the planned tokens after the policy returns, "
    "and state.preempt sets a recomputed victim's to 0":
        "不要自己改動 seq.num_computed_tokens：策略回傳之後，Scheduler 會依計畫的 token 數把它往前推進，"
        "而 state.preempt 會把要重新計算的被搶佔者的計數設為 0",
    "the policy freed {seqs} with state.memory.release": "策略用 state.memory.release 釋放了 {seqs}",
    "take memory from a running sequence only with state.preempt(victim): it frees the blocks, sets the count to 0 "
    "and puts the victim at the front of state.waiting":
        "要從執行中的序列拿走記憶體，只能用 state.preempt(victim)：它會釋放區塊、把計數設為 0，"
        "並把被搶佔者放到 state.waiting 的最前面",
    "the plan gives {odd}: the tokens are ints, which the Scheduler adds to seq.num_computed_tokens":
        "計畫給出 {odd}：token 數必須是 int，Scheduler 會把它加到 seq.num_computed_tokens 上",
    "the policy changed {seq}'s num_computed_tokens from {count} to {now}":
        "策略把 {seq} 的 num_computed_tokens 從 {count} 改成了 {now}",
    "the policy changed {seq}'s num_computed_tokens from {count} to {now} (it was preempted: 0)":
        "策略把 {seq} 的 num_computed_tokens 從 {count} 改成了 {now}（它已被搶佔，應為 0）",
    "{message} {hint}": "{message}。{hint}",
    "policy": "排程策略",

    # the Scheduler's refusals of a plan, and the rule each breaks
    "the scheduling policy {policy} returned {kind}; it must return a dict {{sequence: tokens}}":
        "排程策略 {policy} 回傳了 {kind}；它必須回傳 {{序列: token 數}} 形式的 dict",
    "the scheduling policy {policy} planned {tokens} tokens for {seq}: a token count is a whole number (an int)":
        "排程策略 {policy} 為 {seq} 規劃了 {tokens} 個 token：token 數必須是整數（int）",
    "the scheduling policy {policy} planned {seq}, which is not in state.running after the step":
        "排程策略 {policy} 規劃了 {seq}，但策略執行完後它並不在 state.running 裡",
    "the scheduling policy {policy} planned {tokens} tokens for {seq}, but memory granted it nothing: admit or grow "
    "exactly what you schedule":
        "排程策略 {policy} 為 {seq} 規劃了 {tokens} 個 token，記憶體卻什麼也沒有配給它：排入多少，就要恰好允入或成長多少",
    "the scheduling policy {policy} planned {tokens} tokens for {seq}, but memory granted it {granted} tokens: admit "
    "or grow exactly what you schedule":
        "排程策略 {policy} 為 {seq} 規劃了 {tokens} 個 token，記憶體配給它的卻是 {granted} 個 token："
        "排入多少，就要恰好允入或成長多少",
    "the scheduling policy {policy} took memory for {seqs} but did not schedule them":
        "排程策略 {policy} 為 {seqs} 取得了記憶體，卻沒有排入它們",
    "the scheduling policy {policy} planned {tokens} tokens, over the token budget of {budget}":
        "排程策略 {policy} 規劃了 {tokens} 個 token，超出 token 預算 {budget}",
    "the scheduling policy {policy} runs {seats} seats, over max_num_seqs={limit}":
        "排程策略 {policy} 佔用了 {seats} 個座位，超過 max_num_seqs={limit}",
    "the scheduling policy {policy} admitted a sequence but left it in state.waiting":
        "排程策略 {policy} 允入了一條序列，卻把它留在 state.waiting 裡",
    "grow or admit exactly the tokens you schedule, and schedule nothing memory refused (a None from grow or admit "
    "granted nothing)":
        "排入多少 token，就恰好成長或允入多少；記憶體拒絕的，一個都不要排入（grow 或 admit 回傳 None，"
        "表示什麼都沒有配給）",
    "schedule every sequence you grew or admitted, with the tokens memory granted":
        "凡是你讓它成長或允入的序列都要排入，token 數就是記憶體配給的數量",
    "decodes and prompt chunks share state.token_budget: a sequence computes at most the budget left, so a long "
    "prompt is prefilled in chunks over several steps":
        "解碼與提示詞的分塊共用 state.token_budget：一條序列最多只能計算剩下的預算，所以長提示詞要分成好幾步、"
        "一塊一塊地預填充",
    "count seats with seq.num_seqs: a request with n samples takes n seats until they are forked (then each sample "
    "takes one)":
        "用 seq.num_seqs 計算座位：有 n 個樣本的請求在樣本分岔之前佔 n 個座位（分岔之後每個樣本各佔一個）",
    "popleft an admitted sequence from state.waiting as you append it to state.running":
        "把允入的序列 append 到 state.running 的同時，也要把它從 state.waiting 中 popleft 出來",
    "key the plan by the sequence records themselves (from state.running or state.waiting), not their ids":
        "計畫的鍵要用序列紀錄本身（取自 state.running 或 state.waiting），而不是它們的 id",
    "{seq} was preempted after it was planned: a victim is the newest running sequence, which the oldest-first loop "
    "has not reached yet, and a preempted sequence is not scheduled":
        "{seq} 在排入計畫之後被搶佔了：被搶佔的是最新的執行中序列，從最舊的開始的迴圈還沒輪到它，"
        "而被搶佔的序列不會被排入",
    "append an admitted sequence to state.running (and popleft it from state.waiting)":
        "把允入的序列 append 到 state.running（並把它從 state.waiting 中 popleft 出來）",
}
