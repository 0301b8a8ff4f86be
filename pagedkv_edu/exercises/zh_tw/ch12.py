"""zh-TW lines of :mod:`pagedkv_edu.exercises.ch12`: the engine's step, and the capstone's run."""

MESSAGES: dict[str, str] = {
    # the shown traces
    "three prompts of 7, 8 and 9 tokens in 8 blocks of 4: the newest is preempted, then recomputed":
        "三個長度分別為 7、8、9 個 token 的提示詞，放進 8 個區塊（每個 4 個槽位）：最新的請求被搶佔，之後重新計算",
    "a token budget of 10: a 25-token prompt is prefilled in chunks beside two decodes":
        "token 預算為 10：一個 25 個 token 的提示詞分塊預填充，旁邊同時有兩個解碼",
    "a request with n = 3 samples forks after its prompt; one with n = 2 beside it":
        "一個 n = 3 的請求在提示詞之後分岔出它的樣本；旁邊還有一個 n = 2 的請求",
    "requests that ask for no tokens (max_tokens=0), one before the first step and one later":
        "要求零個 token（max_tokens=0）的請求：一個在第一步之前到達，一個較晚才到",
    "stop tokens: r0 stops at its 2nd token (its own stop token), r1 at the engine's; r2 runs to max_tokens":
        "停止 token：r0 在它的第 2 個 token 停止（它自己的停止 token），r1 停在引擎的停止 token；r2 一路跑到 max_tokens",
    "a request that can never be held: 2 of 8 blocks are held outside the engine, and it needs 7":
        "一個永遠放不下的請求：8 個區塊中有 2 個被引擎之外的請求佔住，而它需要 7 個",
    "prefix caching: four prompts share 10 tokens, the last arrives after the first finished":
        "前綴快取：四個提示詞共用開頭的 10 個 token，最後一個在第一個完成之後才到達",
    "the tiny random Llama: greedy and sampled requests, n = 2, a preemption, log-probs kept":
        "小型隨機 Llama：有貪婪解碼也有取樣的請求、n = 2、一次搶佔，並保存 log-probs",
    "the tiny random Llama with prefix caching and a token budget of 8: chunks, hits, n = 3":
        "開啟前綴快取、token 預算為 8 的小型隨機 Llama：分塊、快取命中、n = 3",
    "hidden case {n}": "隱藏案例 {n}",

    # what a step saw, returned and left
    "running (computed/tokens) [{running}]; waiting [{waiting}]; {free} free blocks of {size}":
        "執行中（已計算/token 數）[{running}]；等待中 [{waiting}]；{free} 個空閒區塊（每個 {size} 個槽位）",
    "none": "無",
    "{seq} ({tokens} tokens)": "{seq}（{tokens} 個 token）",
    "{seq} ({tokens} tokens, n={n})": "{seq}（{tokens} 個 token，n={n}）",
    "{seq} ({tokens} tokens, preempted)": "{seq}（{tokens} 個 token，已被搶佔）",
    "{seq} ({tokens} tokens, n={n}, preempted)": "{seq}（{tokens} 個 token，n={n}，已被搶佔）",
    "{items}, {item}": "{items}、{item}",
    "{items}; {item}": "{items}；{item}",
    "waiting": "等待中",
    "running": "執行中",
    "preempted": "被搶佔",
    "swapped": "已置換出去",
    "finished": "已完成",
    "finished ({reason})": "已完成（{reason}）",
    "{state}, tokens {tokens}": "{state}，token 為 {tokens}",
    "{state}, tokens {tokens}, log-probs kept": "{state}，token 為 {tokens}，保存了 log-probs",
    "{kind} {value} (a step returns a list of RequestOutput)": "{kind} {value}（step 應回傳由 RequestOutput 組成的串列）",
    "a list holding {value} (a step returns the RequestOutputs engine.finish_sequence gives)":
        "一個含有 {value} 的串列（step 應回傳 engine.finish_sequence 給出的 RequestOutput）",
    "r{request}: {samples}": "r{request}：{samples}",
    "sample {i} {tokens} ({reason})": "樣本 {i} {tokens}（{reason}）",

    # what differs
    "returned the same outputs in another order: yours {yours}, the shipped step's {theirs} (a step returns its "
    "outputs in the order their requests ended: those that asked for no tokens, then those the scheduler failed, "
    "then the batch's)":
        "回傳了相同的輸出，但順序不同：你的是 {yours}，隨附 step 的是 {theirs}（step 依請求結束的先後回傳輸出："
        "先是要求零個 token 的請求，再來是排程器判定失敗的請求，最後是批次中的請求）",
    "returned: yours {yours}; the shipped step's {theirs}":
        "回傳的輸出：你的 step 回傳 {yours}；隨附的 step 回傳 {theirs}",
    "returned: yours nothing; the shipped step's {theirs}":
        "回傳的輸出：你的 step 什麼都沒有回傳；隨附的 step 回傳 {theirs}",
    "returned: yours {yours}; the shipped step's nothing":
        "回傳的輸出：你的 step 回傳 {yours}；隨附的 step 什麼都沒有回傳",
    "record {name}: yours {yours}; the shipped step's {theirs}":
        "紀錄 {name}：你的 step 之後是{yours}；隨附的 step 之後是{theirs}",
    "record {name}: yours does not exist; the shipped step's {theirs}":
        "紀錄 {name}：你的 step 之後不存在；隨附的 step 之後是{theirs}",
    "record {name}: yours {yours}; the shipped step's does not exist":
        "紀錄 {name}：你的 step 之後是{yours}；隨附的 step 之後不存在",
    "the scheduler decided {yours} times in your step, {theirs} in the shipped one's (engine.forward_step decides "
    "once and runs the model on that decision)":
        "排程器在你的 step 中做了 {yours} 次決策，在隨附的 step 中是 {theirs} 次（engine.forward_step 只決策一次，"
        "並依這個決策執行模型）",
    "scheduled: yours {yours}; the shipped step's {theirs}":
        "排入批次的序列（scheduled）：你的是 {yours}；隨附 step 的是 {theirs}",
    "preempted: yours {yours}; the shipped step's {theirs}":
        "被搶佔的序列（preempted）：你的是 {yours}；隨附 step 的是 {theirs}",
    "admitted: yours {yours}; the shipped step's {theirs}":
        "允入的序列（admitted）：你的是 {yours}；隨附 step 的是 {theirs}",
    "failed: yours {yours}; the shipped step's {theirs}":
        "失敗的請求（failed）：你的是 {yours}；隨附 step 的是 {theirs}",
    "block tables: {tables}": "區塊表：{tables}",
    "{seq} yours {yours}, the shipped step's {theirs}": "{seq} 在你的 step 之後是 {yours}，在隨附的 step 之後是 {theirs}",
    "{seq} yours none, the shipped step's {theirs}": "{seq} 在你的 step 之後沒有區塊表，在隨附的 step 之後是 {theirs}",
    "{seq} yours {yours}, the shipped step's none": "{seq} 在你的 step 之後是 {yours}，在隨附的 step 之後沒有區塊表",
    "recorded: after your step the engine's history and trace hold {yours} entries, after the shipped step's {theirs}":
        "記錄的內容：你的 step 之後，引擎的歷史紀錄與追蹤共有 {yours} 筆，隨附的 step 之後則是 {theirs} 筆",
    "the step's trace frame (what engine.record saw) differs in {fields}: record the step once its tokens are in "
    "and what stopped has finished":
        "這一步的追蹤影格（engine.record 看到的內容）在 {fields} 上不同：要等這一步的 token 都附加進去、"
        "停止的序列都結束之後，才記錄這一步",

    # the known slips
    "a request that asked for no tokens (max_tokens=0) holds no memory, so the scheduler never sees it: its output "
    "comes from engine.take_ready(), which the step returns with the others":
        "要求零個 token（max_tokens=0）的請求不佔任何記憶體，所以排程器永遠看不到它：它的輸出來自 "
        "engine.take_ready()，由 step 連同其他輸出一起回傳",
    "a request in scheduled.failed can never be held: end it with engine.finish_sequence(request, FAILED, "
    "release=False) (it holds no memory) and return what that gives":
        "scheduled.failed 裡的請求永遠放不下：用 engine.finish_sequence(request, FAILED, release=False) 結束它"
        "（它不佔任何記憶體），並回傳這個呼叫給出的結果",
    "a sequence whose step computed only a chunk of its prompt has no next token yet: sample only for the "
    "scheduled entries with s.samples true":
        "這一步只計算了提示詞其中一個分塊的序列，還沒有下一個 token：只為 s.samples 為真的排入項目取樣",
    "a request with n > 1 forks its other samples after its prompt: sample for every sequence "
    "engine.samplers(s.seq) returns (the sequence itself, and its siblings the first time), each from s's row of "
    "the output":
        "n > 1 的請求在完成提示詞之後，會分岔出它的其他樣本：engine.samplers(s.seq) 回傳的每個序列都要取樣"
        "（序列本身；第一次呼叫時還有它的兄弟序列），而且都從輸出中 s 的那一列取樣",
    "call engine.forward_step() once per step: it asks the scheduler for one decision and runs the model on it; a "
    "second call decides (and runs) another step inside this one":
        "每一步只呼叫 engine.forward_step() 一次：它向排程器要一個決策，並依這個決策執行模型；"
        "第二次呼叫會在這一步裡面再決策（並執行）另一步",
    "give every sequence that samples its token with engine.append_token(request, token, logprobs): the record's "
    "tokens are what the next step computes and what its output returns":
        "用 engine.append_token(request, token, logprobs) 把取樣到的 token 交給每個取樣的序列："
        "紀錄裡的 token 就是下一步要計算的內容，也是它的輸出要回傳的內容",
    "a sequence the scheduler preempted in this step (scheduled.preempted) has no row in the model's output: it "
    "samples nothing until it is readmitted and recomputed":
        "排程器在這一步搶佔的序列（scheduled.preempted）在模型的輸出中沒有對應的列："
        "在它重新允入、重新計算之前，都不取樣",
    "after each token ask stop_reason(request, engine.config.stop_token_ids, engine.tokenizer): a stop token or "
    "max_tokens reached ends the sequence, by engine.finish_sequence(request, reason)":
        "每附加一個 token，就問一次 stop_reason(request, engine.config.stop_token_ids, engine.tokenizer)："
        "遇到停止 token 或達到 max_tokens，序列就此結束，用 engine.finish_sequence(request, reason) 結束它",
    "with keep_logprobs on, give engine.append_token the row's log-probs (sample_tokens returns them, one row per "
    "row of the output), as the third argument":
        "開啟 keep_logprobs 時，要把那一列的 log-probs 當成第三個引數傳給 engine.append_token"
        "（sample_tokens 會回傳它們，輸出的每一列對應一列）",
    "index the log-probs by the row of the output a sequence sampled from (the row of its (row, sequence) pair), "
    "not by the pair's place in the list: siblings share a row":
        "要用序列取樣的那一列來索引 log-probs（也就是它那個 (row, sequence) 配對裡的 row），"
        "而不是配對在串列中的位置：兄弟序列共用同一列",
    "end a sequence that stopped with engine.finish_sequence(request, reason): it gives the sequence's blocks back "
    "(release=False is for a request that holds none, one the scheduler failed)":
        "用 engine.finish_sequence(request, reason) 結束已停止的序列：它會歸還序列的區塊"
        "（release=False 是給不佔任何區塊的請求用的，也就是被排程器判定失敗的請求）",
    "end the step with engine.record(scheduled): the engine's history and the trace (the replay) read it":
        "最後用 engine.record(scheduled) 結束這一步：引擎的歷史紀錄與追蹤（重播）都靠它",
    "a request's output is ready only once its last sample has stopped: return what engine.finish_sequence "
    "returns (an empty list until then), not an output of your own":
        "請求的輸出要等它最後一個樣本停止後才就緒：回傳 engine.finish_sequence 回傳的內容"
        "（在那之前是空串列），而不是你自己建立的輸出",

    # where the step failed
    "step {step} (before it: {before})": "第 {step} 步（這一步之前：{before}）",
    "your step {error}": "你的 step {error}",
    "your step {error} (your line {n}: `{line}`)": "你的 step {error}（你的第 {n} 行：`{line}`）",
    "after your step the engine {error}": "在你的 step 之後，引擎{error}",
    "after step {step} the shipped engine is done; yours still has unfinished requests {left}":
        "第 {step} 步之後，隨附的引擎已經完成；你的引擎仍有未完成的請求 {left}",
    "after step {step} the shipped engine is done; yours still has unfinished requests (none the scheduler holds)":
        "第 {step} 步之後，隨附的引擎已經完成；你的引擎仍有未完成的請求（但排程器裡一個也沒有）",

    # the capstone
    "step {step}: {mine} against {theirs}": "第 {step} 步：{mine} 與 {theirs} 不同",
    "{mine} steps against {theirs}": "步數不同：{mine} 步與 {theirs} 步",
    "request {i}: {mine} against {theirs}": "請求 {i}：{mine} 與 {theirs} 不同",
    "your block manager passed chapter 2 but has no fork yet: the capstone's request with n = 3 forks its samples, "
    "so the shipped manager serves this run; chapter 7 adds fork and copy-on-write to your file":
        "你的區塊管理器通過了第 2 章，但還沒有 fork（分岔）：總結專題中 n = 3 的請求要分岔出它的樣本，"
        "所以這次執行改由隨附的區塊管理器服務；第 7 章會在你的檔案裡加上分岔與寫入時複製",
    "the decode kernel is yours, but Triton runs it in its interpreter on this CPU (ten seconds or more a decode "
    "step of SmolLM2's 30 layers): the capstone's attention is {instead} instead; on a CUDA machine your kernel "
    "runs":
        "解碼核心是你的，但在這台 CPU 上，Triton 會在它的直譯器裡執行這個核心（SmolLM2 有 30 層，每個解碼步要十秒以上），"
        "所以總結專題的注意力改用{instead}；在 CUDA 機器上，執行的就是你的核心",
    "set aside for the capstone: it cannot fork yet (chapter 7), and n = 3 needs it":
        "總結專題暫不採用：它還不能分岔（第 7 章），而 n = 3 的請求需要分岔",
    "set aside for the capstone: Triton's interpreter (the attention is {instead})":
        "總結專題暫不採用：Triton 的直譯器太慢（注意力改用{instead}）",
    "your chapter-3 gather": "你在第 3 章寫的 gather",
    "the shipped torch path": "隨附的 torch 路徑",
    "none of the {total} parts is yours in this run: both engines ran the shipped parts, so the comparison above "
    "checks the capstone's machinery, not your code; once your files pass their chapters' graders, run this "
    "notebook again and your parts serve the same fifty requests":
        "這次執行中，{total} 個部件沒有一個是你的：兩個引擎執行的都是隨附的部件，所以上面的比對檢查的是總結專題本身的機制，"
        "而不是你的程式碼；等你的檔案通過各章的評分程式之後，再執行一次這本筆記本，你的部件就會服務同樣的五十個請求",
    "{count} of {total} parts are yours ({yours}): the engine ran {lines} lines of your code; shipped: {shipped}":
        "{total} 個部件中有 {count} 個是你的（{yours}）：引擎執行了你寫的 {lines} 行程式碼；隨附的部件：{shipped}",
    "{count} of {total} parts are yours ({yours}): the engine ran {lines} lines of your code, every part of it":
        "{total} 個部件中有 {count} 個是你的（{yours}）：引擎執行了你寫的 {lines} 行程式碼，每個部件都出自你手",
}
