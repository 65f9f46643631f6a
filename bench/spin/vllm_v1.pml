/*
 * vLLM V1 (v0.32.0) Scheduler.schedule() + update_from_output(), FCFS, as one SPIN
 * transition per scheduler step: the same rules as model/vllm/rules.py (chunked prefill
 * on or off, no long-prefill threshold, no watermark, scheduler_reserve_full_isl on,
 * prefix caching off), written again by hand for SPIN, so the two can be cross-checked
 * state for state (bench/spin/run.py).
 *
 * One step is one `atomic` block: the environment's arrivals (up to N requests in all,
 * only before steps 1..ARR, each of a kind prompt 1..PMAX x max_tokens 1..MTMAX, in order:
 * the k-th request takes slot k and joins the waiting queue's tail), the deterministic
 * schedule (d_step), the environment's EOS choice for each request that samples a token,
 * and the deterministic update (d_step). SPIN stores no state inside an atomic sequence,
 * so the stored states are exactly the states between two steps.
 *
 * A stored state is: per slot its status, prompt_len, max_tokens, num_computed_tokens,
 * num_output_tokens and blocks (a slot keeps them when it finishes, as the rules do;
 * with RETIRE = 1 a finished slot keeps only its status, as the array explorer's retired
 * slots do), the
 * running list and the waiting deque as arrays of slot ids (unused entries NONE), the free
 * blocks, and `phase` = min(steps taken, ARR), which says whether requests may still
 * arrive. With STARVE = k the state also counts, per slot, the consecutive steps it has
 * been waiting with 0 tokens, and the model asserts that count stays below k. Scratch
 * variables are 0 between steps, or `hidden` (not part of the state vector).
 *
 * Build (the SPIN manual's recipe): spin -a -DN=3 vllm_v1.pml; cc -O2 -DSAFETY -DNOREDUCE
 * -DCOLLAPSE -o pan pan.c; ./pan -m100000.
 */

#ifndef N
#define N 3
#endif
#ifndef BUDGET
#define BUDGET 8          /* max_num_batched_tokens = token budget */
#endif
#ifndef SEQS
#define SEQS 4            /* max_num_seqs = max_num_active_reqs */
#endif
#ifndef BS
#define BS 4              /* block_size */
#endif
#ifndef USABLE
#define USABLE 5          /* num_gpu_blocks - 1 (the null block) */
#endif
#ifndef MML
#define MML 16            /* max_model_len */
#endif
#ifndef PMAX
#define PMAX 8
#endif
#ifndef MTMAX
#define MTMAX 4
#endif
#ifndef MTMIN
#define MTMIN 1           /* MTMIN = MTMAX: only the largest max_tokens (bench/spin/run.py --twins) */
#endif
#ifndef ARR
#define ARR 3             /* requests arrive only before steps 1..ARR */
#endif
#ifndef CHUNKED
#define CHUNKED 1
#endif
#ifndef STARVE
#define STARVE 0          /* k > 0: assert no slot waits k steps in a row with 0 tokens */
#endif
#ifndef SAFETY_ASSERTS
#define SAFETY_ASSERTS 1
#endif
#ifndef RETIRE
#define RETIRE 0          /* 1: a finished request's slot forgets the request */
#endif

#define ABSENT 0
#define WAITING 1
#define RUNNING 2
#define PREEMPTED 3
#define FINISHED 4
#define NONE 255

byte st[N];
byte pl[N];
byte mt[N];
byte nc[N];
byte no[N];
byte bl[N];
byte rq[N] = NONE;
byte nrun;
byte wq[N] = NONE;
byte nwait;
byte freeb = USABLE;
byte phase;
#if STARVE
byte starve[N];
#endif

/* Scratch that is live across a nondeterministic choice (SPIN's depth-first search comes
   back to a choice and must find it as it was) is visible and set back to 0 before the
   step ends; the rest is hidden: written and read inside one d_step. */
byte narr, k, x, eos[N], sched[N], smp[N], waswait[N];
hidden byte j, sel, v;
hidden short budget, n, need, y, total, dec, acc;
hidden byte ntok[N], wasrun[N], joined[N];
hidden byte halted, fits, pre;

/* the schedule: RUNNING loop (scheduler.py:657-887), then WAITING loop (900-1395) */
inline schedule() {
  budget = BUDGET; pre = 0; halted = 0;
  for (k : 0 .. N - 1) {
    sched[k] = 0; joined[k] = 0;
    ntok[k] = pl[k] + no[k];
    waswait[k] = (st[k] == WAITING || st[k] == PREEMPTED);
    wasrun[k] = (st[k] == RUNNING)
  }
  k = 0;
  do
  :: (halted || k >= nrun || budget <= 0) -> break
  :: else ->
     sel = rq[k];
     n = ntok[sel] - nc[sel];
     if :: n > budget -> n = budget :: else -> skip fi;
     if :: n > MML - nc[sel] - 1 -> n = MML - nc[sel] - 1 :: else -> skip fi;
     if
     :: n <= 0 -> k++
     :: else ->
        fits = 0;
        do
        :: true ->
           y = nc[sel] + n;
           if :: y > MML -> y = MML :: else -> skip fi;
           need = (y + BS - 1) / BS - bl[sel];
           if :: need < 0 -> need = 0 :: else -> skip fi;
           if
           :: need <= freeb -> fits = 1; break
           :: else ->
              /* preempt running[-1] (796-802, 1571-1614): free its blocks, recompute from
                 0, prepend it to the waiting deque */
              v = rq[nrun - 1];
              freeb = freeb + bl[v]; bl[v] = 0; st[v] = PREEMPTED; nc[v] = 0;
              nrun--; rq[nrun] = NONE;
              j = nwait;
              do :: j > 0 -> wq[j] = wq[j - 1]; j-- :: else -> break od;
              wq[0] = v; nwait++;
              pre = 1;
              if :: v == sel -> break :: else -> skip fi
           fi
        od;
        if
        :: fits -> sched[sel] = n; bl[sel] = bl[sel] + need; freeb = freeb - need;
                   budget = budget - n; k++
        :: else -> halted = 1
        fi
     fi
  od;
  if
  :: !pre ->
     do
     :: (nwait == 0 || budget <= 0 || nrun >= SEQS) -> break
     :: else ->
        sel = wq[0];
        total = ntok[sel];
        n = total;
        if :: !CHUNKED && n > budget -> break :: else -> skip fi;
        if :: n > budget -> n = budget :: else -> skip fi;
        y = total; if :: y > MML -> y = MML :: else -> skip fi;
        need = (y + BS - 1) / BS;
        if :: need > freeb -> break :: else -> skip fi;   /* full sequence must fit */
        y = n; if :: y > MML -> y = MML :: else -> skip fi;
        need = (y + BS - 1) / BS;
        if :: need > freeb -> break :: else -> skip fi;
        sched[sel] = n; bl[sel] = need; freeb = freeb - need; budget = budget - n;
        st[sel] = RUNNING; rq[nrun] = sel; nrun++; joined[sel] = 1;
        j = 0;
        do :: j + 1 < nwait -> wq[j] = wq[j + 1]; j++ :: else -> break od;
        nwait--; wq[nwait] = NONE
     od
  :: else -> skip
  fi;
  for (k : 0 .. N - 1) {
    smp[k] = (sched[k] > 0 && nc[k] + sched[k] >= ntok[k])
  }
}

/* the catalogue's step properties that apply under FCFS with chunked prefill on */
inline check_step() {
  skip;
#if SAFETY_ASSERTS
  ;
  acc = 0; dec = 0;
  for (k : 0 .. N - 1) {
    acc = acc + sched[k];
    assert(nc[k] + sched[k] <= ntok[k]);                 /* computed_within_tokens */
    assert(!(pre && joined[k]));                         /* no_admission_after_preemption */
    if :: wasrun[k] && ntok[k] - nc[k] == 1 -> dec++ :: else -> skip fi
  }
  assert(acc <= BUDGET && budget >= 0);                  /* budget_respected */
  assert(nrun <= SEQS);                                  /* running_within_max_num_seqs */
  acc = freeb;
  for (k : 0 .. N - 1) { acc = acc + bl[k] }
  assert(acc == USABLE);                                 /* kv_blocks_conserved */
  if                                                     /* decodes_exhaust_budget */
  :: dec >= BUDGET -> for (k : 0 .. N - 1) { assert(!waswait[k] || sched[k] == 0) }
  :: else -> skip
  fi;
  assert(dec < BUDGET || (dec == BUDGET && dec == SEQS)) /* exhausting_decodes_fill_... */
#endif
}

/* update_from_output (scheduler.py:2026-2295): advance, sample, stop on EOS or length,
   free a finished request's blocks and take it out of `running` */
inline update() {
  for (k : 0 .. N - 1) {
    nc[k] = nc[k] + sched[k];
    if
    :: smp[k] ->
       no[k]++;
       if
       :: eos[k] || pl[k] + no[k] >= MML || no[k] >= mt[k] ->
          freeb = freeb + bl[k]; bl[k] = 0; st[k] = FINISHED;
#if RETIRE
          pl[k] = 0; mt[k] = 0; nc[k] = 0; no[k] = 0;
#endif
          skip
       :: else -> skip
       fi
    :: else -> skip
    fi;
#if STARVE
    if
    :: waswait[k] && sched[k] == 0 -> starve[k]++
    :: else -> starve[k] = 0
    fi;
    assert(starve[k] < STARVE);
#endif
  }
  j = 0;
  for (k : 0 .. N - 1) {
    if
    :: k < nrun && st[rq[k]] == RUNNING -> rq[j] = rq[k]; j++
    :: else -> skip
    fi
  }
  for (k : 0 .. N - 1) { if :: k >= j -> rq[k] = NONE :: else -> skip fi }
  nrun = j;
  if :: phase < ARR -> phase++ :: else -> skip fi;
  /* visible scratch back to 0, so that it never tells two states apart */
  for (k : 0 .. N - 1) { eos[k] = 0; sched[k] = 0; smp[k] = 0; waswait[k] = 0 }
  narr = 0; k = 0; x = 0
}

active proctype scheduler() {
  do
  :: atomic {
       narr = 0;
       for (k : 0 .. N - 1) { if :: st[k] != ABSENT -> narr++ :: else -> skip fi }
       if
       :: phase < ARR ->
          do
          :: narr < N ->
             select(x : 1 .. PMAX); pl[narr] = x;
             select(x : MTMIN .. MTMAX); mt[narr] = x;
             st[narr] = WAITING; wq[nwait] = narr; nwait++; narr++
          :: break
          od
       :: else -> skip
       fi;
       skip;  /* a loop's exit may not jump into a d_step */
       d_step { schedule(); check_step() };
       for (k : 0 .. N - 1) {
         if
         :: smp[k] -> if :: eos[k] = 1 :: eos[k] = 0 fi
         :: else -> eos[k] = 0
         fi
       }
       skip;
       d_step { update() }
     }
  od
}
