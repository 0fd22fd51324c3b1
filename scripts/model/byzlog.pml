/*
 * byzlog.pml — a Promela model of byzlog's messaging protocol, checked with
 * spin by scripts/model/run.sh (`make model`). MODEL.md says what each part
 * stands for in the Go code and what is abstracted away.
 *
 * Fault settings (pick one; run.sh passes them with -D):
 *   FAULT_BYZ    replica 3 is Byzantine: it proposes anything (forged,
 *                replayed, equivocating blocks) and votes anything
 *   FAULT_CRASH  replica 3 is correct but crashes once (between blocks, in
 *                Commit before or after the persisted write) and restarts
 *   GW_BYZ       the gateway is malicious: drops, alters, reorders, replays
 *                and sends fake receipts
 *   TLS          the producer→gateway link is TLS-protected (the intruder on
 *                it sees ciphertext only)
 *   SMALL        smaller workload: one batch per producer
 *   LIVE         SMALL, and after GST: proposers take turns and a correct
 *                proposer's round succeeds (for the LTL runs)
 *   REFS         blocks carry references to bundles, not the bundles
 *                (docs/design.md, "Next: bundles out of consensus"; designed,
 *                not built): a replica votes for a proposal only holding its
 *                bundles durably, and executes a decided block with its own
 *                copy or one fetched from a correct holder
 * Sanity mutations (each MUST give a counterexample):
 *   MUT_F2       replicas 2 and 3 are Byzantine: f = 2 > (n-1)/3
 *   MUT_NOPP     ProcessProposal accepts without re-executing the block
 *   MUT_NOFSYNC  Commit reports the height durable before the data write is
 *   MUT_NODA     (with REFS) ProcessProposal accepts without the bundles
 *   (TLS undefined is the fourth: the intruder learns a payload)
 */

/* ---------- sizes ---------- */
#define NR      4           /* replicas (validators: CometBFT + byzlog-app) */
#define QUORUM  3           /* 2f+1 with n = 4, f = 1 */
#define NP      2           /* producers; producer p writes partition p */
/* batches per producer, one record each: producer 0 sends two (its order
 * matters), producer 1 one (it runs beside 0 on another partition) */
#if defined(LIVE) || defined(SMALL)
#define NB0     1
#else
#define NB0     2
#endif
#define NB1     1
#define NBATCH  (NB0+NB1)   /* distinct genuine batches */
#define NBP(p)  ((p) == 0 -> NB0 : NB1)
#define BASE(p) ((p) == 0 -> 0 : NB0)
#define MAXH    NBATCH      /* heights: each decided block appends a batch */
#define LOGCAP  (NB0+1)     /* room for one wrong append, so it is seen */
#define MPCAP   2           /* CometBFT mempool slots */
#define MAXRETRY 1          /* producer resends of the same signed bytes */
#define CR      3           /* the replica that may crash (FAULT_CRASH) */

/* ---------- symbolic batches and signatures ----------
 * A batch is one byte: 0 none; GEN(b) = b+1 is batch b (b = BASE(p)+seq
 * for producer p) with the body its producer signed; FORGED(b) = b+1+NBATCH
 * claims to be batch b but its body was altered (or made up), so its ed25519
 * signature does not verify. Nobody but producer p creates GEN(b) for its b:
 * that is "cannot forge signatures". */
#define GEN(b)     ((b)+1)
#define FORGED(b)  ((b)+1+NBATCH)
#define SIGOK(c)   ((c) >= 1 && (c) <= NBATCH)
#define BID(c)     (((c)-1) % NBATCH)
#define PROD(c)    (BID(c) >= NB0 -> 1 : 0)
#define SEQ(c)     (BID(c) - BASE(PROD(c)))
/* A transaction (a ProduceBundle) is one or two batches: tx = c1*NC + c2. */
#define NC         (2*NBATCH+1)
#define TX(c1,c2)  ((c1)*NC+(c2))
#define B1(tx)     ((tx) / NC)
#define B2(tx)     ((tx) % NC)
#define NOTX       0
#define REJ        255      /* a receipt slot meaning "rejected" */

/* batch verdicts of core's batch(): codes.go names */
#define R_OK    0
#define R_DUP   1           /* CodeDuplicate: answered with original offsets */
#define R_GAP   2           /* CodeSequenceGap */
#define R_BAD   3           /* CodeBadSignature / CodeMalformedTx */

/* ---------- which replicas are faulty ---------- */
#if defined(MUT_F2)
#define BYZ(r)  ((r) >= 2)
#elif defined(FAULT_BYZ)
#define BYZ(r)  ((r) == 3)
#else
#define BYZ(r)  0
#endif
/* the node the gateway submits to and follows; always correct and up */
#define FOLLOW  0
#define HONEST(r) (!BYZ(r))

/* ---------- replica state ----------
 * Persisted (RocksDB, one synced WriteBatch per Commit): the log per
 * partition and the app height `ph` (what Info reports). CometBFT's own
 * block store `dec`/`bsh` is persisted before FinalizeBlock. What
 * FinalizeBlock stages lives only inside the decision step: a crash loses it. */
byte plen[NR*NP];
byte pent[NR*NP*LOGCAP];
byte ph[NR];                 /* app height persisted (Info) */
byte bsh[NR];                /* CometBFT block store height */
byte dec[NR*(MAXH+1)];       /* CometBFT block store: tx decided per height */
bool up[NR];
#ifdef REFS
/* the app's bundle store: replica r holds block h's bundles, durably
 * (written, synced, by the ProcessProposal that accepted the block, or by
 * the Commit of a FinalizeBlock that fetched them) */
bool hd[NR*(MAXH+1)];
#define HD(r,h)     hd[(r)*(MAXH+1)+(h)]
#endif
#define LEN(r,p)    plen[(r)*NP+(p)]
#define ENT(r,p,i)  pent[((r)*NP+(p))*LOGCAP+(i)]
#define DEC(r,h)    dec[(r)*(MAXH+1)+(h)]

/* ---------- the network ---------- */
byte H = 1;                  /* next height to decide */
byte prop = 0;               /* proposer rotation (LIVE only) */
byte mp[MPCAP];              /* mempool (one, gossip abstracted) */
byte cert1[MAXH+1];          /* blocks with a 2f+1 commit per height */
byte cert2[MAXH+1];          /* a second one: only ever set by a fork */
byte crashes = 0;

chan wire   = [1] of { byte };           /* producer → (intruder) → gateway */
chan gwin   = [2] of { byte };
chan commits = [MAXH] of { byte, bool }; /* blocks as the gateway's node (FOLLOW) committed them */
chan rcpt[NP] = [3] of { byte, byte };   /* gateway → producer: batch, offset or REJ */

/* Scratch of the steps that never block (a consensus round, a restart, an
 * indexer, intruder or gateway step): hidden, so not part of the state. */
hidden byte pr, x, y, tx, c, v, n0, n1, i, j, k, p, r, vx, vy, h, n, o, nh;
hidden byte ok, sawy[NR];

/* Each assertion checks a named flag, so a counterexample says which
 * property failed. */
hidden byte appended_signed, appended_in_sequence, logs_prefix, logs_equal_same_height,
  app_hash_agrees, acked_record_kept, consumer_dense_authentic, indexer_verified,
  decided_block_valid, receipt_in_order, receipt_in_log, decided_block_available;

/* ---------- observations for properties ---------- */
bool acked[NBATCH];          /* a commit receipt was given for batch b */
byte ackoff[NBATCH];
bool done[NP];               /* producer p resolved every batch */
bool waiting[NP];            /* producer p has a batch in flight */
bool rejected[NP];
bool intruder_read_payload = 0;  /* the intruder learnt a payload */

/* ---------- the state machine (abciapp/core) ---------- */

/* batch(): verdict for batch c given the producers' next sequences n0, n1
 * (scratch). The signature is checked first, as decodeTx does. */
inline verdict(c, v) {
  if
  :: !SIGOK(c) -> v = R_BAD
  :: SIGOK(c) && SEQ(c) < (PROD(c) == 0 -> n0 : n1) -> v = R_DUP
  :: SIGOK(c) && SEQ(c) > (PROD(c) == 0 -> n0 : n1) -> v = R_GAP
  :: SIGOK(c) && SEQ(c) == (PROD(c) == 0 -> n0 : n1) -> v = R_OK
  fi
}

/* Verify / Execute's validity: every batch of the bundle valid, in order,
 * against replica r's committed state (all-or-nothing). */
inline validTx(r, tx, ok) {
  n0 = LEN(r,0); n1 = LEN(r,1);
  c = B1(tx);
  verdict(c, v);
  ok = (v == R_OK);
  if
  :: ok && B2(tx) != 0 ->
     if :: PROD(c) == 0 -> n0++ :: else -> n1++ fi;
     c = B2(tx);
     verdict(c, v);
     ok = (v == R_OK)
  :: else -> skip
  fi
}

/* append batch c to replica r's log: offsets dense, one value per offset,
 * only signed batches, each producer's in sequence order. */
inline append(r, c) {
  i = LEN(r, PROD(c));
  appended_signed = SIGOK(c);       /* authenticity, integrity */
  assert(appended_signed);
  appended_in_sequence = (SEQ(c) == i && i < LOGCAP); /* sequentiality, replay-freedom */
  assert(appended_in_sequence);
  ENT(r, PROD(c), i) = c;
  LEN(r, PROD(c)) = i + 1
}

/* FinalizeBlock + Commit of tx at height h on replica r. A bad tx of a
 * decided block gets a result code and appends nothing (Execute re-checks
 * everything, it does not trust ProcessProposal). */
inline execute(r, tx, h) {
  validTx(r, tx, ok);
  if
  :: ok ->
     append(r, B1(tx));
     if :: B2(tx) != 0 -> append(r, B2(tx)) :: else -> skip fi
  :: else -> skip
  fi;
#ifdef REFS
  HD(r, h) = 1;                     /* kept with the block's commit */
#endif
  ph[r] = h
}

/* Decide tx at height h on replica r: CometBFT stores the block, then
 * FinalizeBlock stages it, Commit writes it in one synced batch. The crash
 * points are abciapp/failpoint's finalize-start, commit-before-write and
 * commit-after-write. */
inline decide(r, tx, h) {
  DEC(r, h) = tx; bsh[r] = h;
#ifdef FAULT_CRASH
  if
  :: r == CR && crashes < 1 ->
     crashes++;
     if
     :: up[r] = 0                   /* finalize-start, commit-before-write */
     :: execute(r, tx, h); up[r] = 0 /* commit-after-write */
#ifdef MUT_NOFSYNC
     :: ph[r] = h; up[r] = 0        /* height acked durable, data write lost */
#endif
     fi
  :: else -> execute(r, tx, h)
  fi
#else
  execute(r, tx, h)
#endif
}

/* consistency across correct replicas: logs are prefixes of each other and
 * the blocks (hence app hashes: deterministic execution) agree per height. */
inline checkConsistency() {
  j = 0;
  do
  :: j < NR ->
     k = j + 1;
     do
     :: k < NR ->
        if
        :: HONEST(j) && HONEST(k) && up[j] && up[k] ->
           p = 0;
           do
           :: p < NP ->
              i = 0;
              do
              :: i < LEN(j,p) && i < LEN(k,p) -> logs_prefix = (ENT(j,p,i) == ENT(k,p,i)); assert(logs_prefix); i++
              :: else -> break
              od;
              p++
           :: else -> break
           od;
           if :: ph[j] == ph[k] -> logs_equal_same_height = (LEN(j,0) == LEN(k,0) && LEN(j,1) == LEN(k,1));
                 assert(logs_equal_same_height)
              :: else -> skip fi;
           i = 1;
           do
           :: i <= ph[j] && i <= ph[k] -> app_hash_agrees = (DEC(j,i) == DEC(k,i)); assert(app_hash_agrees); i++
           :: else -> break
           od
        :: else -> skip
        fi;
        k++
     :: else -> break
     od;
     j++
  :: else -> break
  od
}

/* fault tolerance: a correct, running replica holds every acknowledged
 * record at its acknowledged offset once it has caught up to it. */
inline checkAcked(r) {
  i = 0;
  do
  :: i < NBATCH ->
     if
     :: acked[i] && ph[r] + 1 >= H ->
        acked_record_kept = (LEN(r, PROD(GEN(i))) > ackoff[i] && ENT(r, PROD(GEN(i)), ackoff[i]) == GEN(i));
        assert(acked_record_kept)
     :: else -> skip
     fi;
     i++
  :: else -> break
  od
}

/* ---------- indexer (light client) and consumer ---------- */
/* The indexer takes block h from some node and publishes its records only if
 * the block matches a header 2f+1 validators signed (results and app hash
 * are functions of the block, execution being deterministic); otherwise it
 * asks another node. The consumer checks that offsets are dense and
 * monotonic and that records are authentic. The indexer reads only decided,
 * immutable data, so it runs in the step that decides h (see MODEL.md). */
byte ioff[NP];               /* the consumer's next offset per partition */

inline publish(tx) {
  n0 = ioff[0]; n1 = ioff[1];
  c = B1(tx); verdict(c, v); ok = (v == R_OK);
  if :: ok && B2(tx) != 0 ->
       if :: PROD(c) == 0 -> n0++ :: else -> n1++ fi;
       c = B2(tx); verdict(c, v); ok = (v == R_OK)
     :: else -> skip fi;
  if
  :: ok ->                                   /* the results say it appended */
     c = B1(tx);
     consumer_dense_authentic = (SIGOK(c) && SEQ(c) == ioff[PROD(c)]);  /* no skip, no repeat */
     assert(consumer_dense_authentic);
     ioff[PROD(c)]++;
     if :: B2(tx) != 0 -> c = B2(tx);
           consumer_dense_authentic = (SIGOK(c) && SEQ(c) == ioff[PROD(c)]);
           assert(consumer_dense_authentic); ioff[PROD(c)]++
        :: else -> skip fi
  :: else -> skip
  fi
}

inline indexBlock(h) {
  if :: n = 0 :: n = 1 :: n = 2 :: n = 3 fi;
  if
  :: BYZ(n) -> if :: tx = TX(FORGED(1), 0) :: tx = cert1[h] fi  /* a lying node */
  :: HONEST(n) && up[n] && bsh[n] >= h -> tx = DEC(n, h)
  :: else -> tx = NOTX                        /* node down or behind */
  fi;
  if
  :: tx != NOTX && (tx == cert1[h] || tx == cert2[h]) -> skip   /* verified */
  :: else -> tx = DEC(FOLLOW, h);             /* ask another node */
     indexer_verified = (tx == cert1[h] || tx == cert2[h]); assert(indexer_verified)
  fi;
  publish(tx)
}

/* ---------- the abstract atomic broadcast and the replicas ---------- */
/* One round per step: the proposer's PrepareProposal, every replica's
 * ProcessProposal vote, and — when 2f+1 vote for a block — FinalizeBlock
 * and Commit on every correct replica that saw the commit. A Byzantine
 * proposer may equivocate (X to some, Y to others); a Byzantine replica
 * votes for both. */
proctype Consensus() {
end_idle:
  do
  :: atomic { H <= MAXH && (mp[0] != NOTX || mp[1] != NOTX) ->
       /* a round starts when there is something to order (CometBFT with
        * create_empty_blocks = false); a Byzantine proposer's own
        * inventions ride on such rounds */
#ifdef LIVE
       /* after GST: proposers take turns and honest ones are heard */
       prop = (prop + 1) % NR; pr = prop;
#else
       /* before GST any replica's proposal may be the one heard: rotation
        * with arbitrary timeouts, without a state variable for it. Correct
        * replicas propose alike, so replica 0 stands for them all; replica
        * 3 is the faulty one (Byzantine or crashing). */
       if :: pr = 0 :: pr = 3 fi;
#endif
       x = NOTX; y = NOTX;
       if
       :: !up[pr] -> skip                 /* the round times out */
       :: up[pr] && BYZ(pr) ->
          /* anything it has seen or can make, but not a valid signature */
          if
          :: mp[0] != NOTX -> x = mp[0]
          :: mp[1] != NOTX -> x = mp[1]
          :: H > 1 -> x = DEC(FOLLOW, H-1)  /* replay a committed block's tx */
          :: x = TX(B1(mp[0] + mp[1]), FORGED(1)) /* a bundle with a tampered batch */
          fi;
          if
          :: y = x
          :: mp[0] != NOTX && mp[0] != x -> y = mp[0]   /* equivocate */
          :: mp[1] != NOTX && mp[1] != x -> y = mp[1]
          fi
       :: up[pr] && HONEST(pr) ->
          /* PrepareProposal: the first mempool tx valid on its state */
          i = 0;
          do
          :: i < MPCAP && mp[i] != NOTX ->
             tx = mp[i]; validTx(pr, tx, ok);
             if :: ok -> x = tx; break :: else -> i++ fi
          :: i < MPCAP && mp[i] == NOTX -> i++
          :: i >= MPCAP -> break
          od;
          y = x
       fi;
#ifdef REFS
       /* Which replicas hold the proposal's bundles when it arrives: the
        * proposer its own, replicas below nh (alike, up to symmetry) by the
        * mempool's gossip. Before GST gossip may not have reached any; a
        * Byzantine proposer may give them to nobody, ever. After GST a
        * correct proposer's have reached every replica. */
#ifdef LIVE
       if :: HONEST(pr) -> nh = NR
          :: else -> if :: nh = 0 :: nh = 1 :: nh = 2 :: nh = NR fi
       fi;
#else
       if :: nh = 0 :: nh = 1 :: nh = 2 :: nh = NR fi;
#endif
#define HAS(r) ((r) == pr || (r) < nh)
#endif
       if
       :: x == NOTX -> skip                 /* no proposal this round */
       :: else ->
          /* ProcessProposal: each correct replica re-executes what it got */
          vx = 0; vy = 0; r = 0;
          do
          :: r < NR ->
             sawy[r] = 0;
             if
             :: BYZ(r) && up[r] ->
                if :: vx++; if :: y != x -> vy++ :: else -> skip fi
                   :: skip fi               /* vote for both, or none */
             :: HONEST(r) && up[r] ->
                /* who got Y: a suffix of the replicas (they are alike) */
                tx = x;
                if :: y != x -> sawy[r] = 1; tx = y
                   :: !(r > 0 && sawy[r-1]) -> skip fi;
#ifdef MUT_NOPP
                ok = 1;
#else
                validTx(r, tx, ok);
#endif
#if defined(REFS) && !defined(MUT_NODA)
                /* no bundles (none arrived within the wait): no vote; with
                 * them, they are written durably before the vote */
                ok = ok && HAS(r);
#endif
                if :: ok && sawy[r] -> vy++ :: ok && !sawy[r] -> vx++ :: else -> skip fi
             :: else -> skip
             fi;
             r++
          :: else -> break
          od;
          if
          :: vx >= QUORUM || vy >= QUORUM ->
             if :: vx >= QUORUM -> cert1[H] = x :: else -> cert1[H] = y fi;
             if :: vx >= QUORUM && vy >= QUORUM && y != x -> cert2[H] = y :: else -> skip fi;
             /* every correct running replica commits: its own block if it
              * got a 2f+1 commit, else the certified one */
             r = 0;
             do
             :: r < NR ->
                if
                :: HONEST(r) && up[r] ->
                   tx = cert1[H];
                   if :: sawy[r] && vy >= QUORUM -> tx = y :: !sawy[r] && vx >= QUORUM -> tx = x :: else -> skip fi;
                   /* block validity: what ProcessProposal guarantees */
                   validTx(r, tx, ok);
                   decided_block_valid = ok; assert(decided_block_valid);
#ifdef REFS
                   /* FinalizeBlock needs the bundles: its own copy, or one
                    * fetched from a correct replica that holds them (the
                    * Byzantine one may withhold or send wrong bytes, which
                    * fail the hash) */
                   n = 0; k = 0;
                   do
                   :: k < NR ->
                      if
                      :: HONEST(k) && up[k] && HAS(k) && ((sawy[k] && y == tx) || (!sawy[k] && x == tx)) -> n++
                      :: else -> skip
                      fi;
                      k++
                   :: else -> break
                   od;
                   decided_block_available = (n >= 1); assert(decided_block_available);
                   if :: HAS(r) && ((sawy[r] && y == tx) || (!sawy[r] && x == tx)) -> HD(r, H) = 1 :: else -> skip fi;
#endif
                   decide(r, tx, H);
                   if :: r == FOLLOW -> commits!tx,ok :: else -> skip fi
                :: else -> skip
                fi;
                r++
             :: else -> break
             od;
             /* CometBFT drops committed txs; the model also drops txs the
              * block made invalid (recheck; see MODEL.md) */
             i = 0;
             do
             :: i < MPCAP ->
                if
                :: mp[i] != NOTX ->
                   tx = mp[i]; validTx(FOLLOW, tx, ok);
                   if :: !ok -> mp[i] = NOTX :: else -> skip fi
                :: else -> skip
                fi;
                i++
             :: else -> break
             od;
             indexBlock(H);
             H++;
             checkConsistency();
             r = 0;
             do :: r < NR -> if :: HONEST(r) && up[r] -> checkAcked(r) :: else -> skip fi; r++
                :: else -> break od
          :: else -> skip                   /* no quorum: next round */
          fi
       fi
     }
#ifdef FAULT_CRASH
  :: up[CR] && crashes < 1 -> crashes++; up[CR] = 0   /* crash between blocks */
  :: !up[CR] -> atomic {
       /* restart: Info reports ph; CometBFT block-syncs what it missed and
        * replays every stored block above ph into the app */
       h = bsh[CR] + 1;
       do
       :: h < H -> DEC(CR, h) = DEC(FOLLOW, h); bsh[CR] = h; h++
       :: else -> break
       od;
       h = ph[CR] + 1;
       do
       :: h <= bsh[CR] ->
#ifdef REFS
          /* a block whose bundles it lacks: fetched from a correct holder */
          if
          :: !HD(CR, h) ->
             n = 0; k = 0;
             do
             :: k < NR -> if :: k != CR && HONEST(k) && up[k] && HD(k, h) -> n++ :: else -> skip fi; k++
             :: else -> break
             od;
             decided_block_available = (n >= 1); assert(decided_block_available)
          :: else -> skip
          fi;
#endif
          tx = DEC(CR, h); execute(CR, tx, h); h++
       :: else -> break
       od;
       up[CR] = 1;
       checkConsistency();
       checkAcked(CR)
     }
#endif
  od
}

/* ---------- the gateway's node answers CheckTx ---------- */
/* Check: signature, sequence not already committed; sequences may run ahead
 * (the earlier one may still be in the mempool); a bundle may not repeat
 * a batch. */
inline checkTx(tx, ok) {
  c = B1(tx); n0 = LEN(FOLLOW,0); n1 = LEN(FOLLOW,1);
  verdict(c, v);
  ok = (v == R_OK || v == R_GAP);
  if
  :: ok && B2(tx) != 0 ->
     c = B2(tx);
     verdict(c, v);
     ok = ((v == R_OK || v == R_GAP) && c != B1(tx))
  :: else -> skip
  fi
}

/* the offset the followed node's results give batch c (REJ if absent) */
inline offsetOf(c, o) {
  o = REJ; i = 0;
  do
  :: i < LEN(FOLLOW, PROD(c)) && ENT(FOLLOW, PROD(c), i) == c -> o = i; break
  :: i < LEN(FOLLOW, PROD(c)) && ENT(FOLLOW, PROD(c), i) != c -> i++
  :: else -> break
  od
}

/* rejected(): answer each batch of a refused bundle from the node's state —
 * duplicates get their original offsets, invalid ones an error, the rest
 * go back in the queue for a new bundle. */
inline answer(c) {
  n0 = LEN(FOLLOW, 0); n1 = LEN(FOLLOW, 1);
  verdict(c, v);
  if
  :: v == R_DUP -> offsetOf(c, o); rcpt[PROD(c)]!c,o  /* its original offsets */
  :: v == R_OK && nq < 4 -> q[nq] = c; nq++
  :: else -> rcpt[PROD(c)]!c,REJ
  fi
}

inline split(tx) {
  answer(B1(tx));
  if :: B2(tx) != 0 -> answer(B2(tx)) :: else -> skip fi
}

/* Every step of the gateway sends at most two receipts, so it waits until
 * the producers' queues have room: no step blocks halfway (see scratch). */
#define RCPTROOM (len(rcpt[0]) <= 1 && len(rcpt[1]) <= 1)

proctype Gateway() {
  byte q[4], nq = 0, pend[2];
#ifdef GW_BYZ
  bool used = 0;
  byte old = NOTX;
#endif
end_gw:
  do
  :: atomic { RCPTROOM && nq < 2 && nempty(gwin) -> gwin?c;
#ifdef GW_BYZ
     if
     :: q[nq] = c; nq++
     :: skip                                    /* drop */
     :: q[nq] = FORGED(BID(c)); nq++            /* alter the body */
     :: !used -> used = 1; rcpt[PROD(c)]!c,0     /* fake receipt */
     fi;
#else
     q[nq] = c; nq++
#endif
     }
  :: atomic { RCPTROOM && nq > 0 && (pend[0] == NOTX || pend[1] == NOTX) ->
       /* bundle what is queued into one tx (order kept) */
       if
       :: tx = TX(q[0], 0); i = 1
       :: nq >= 2 && q[0] != q[1] -> tx = TX(q[0], q[1]); i = 2
#ifdef GW_BYZ
       :: nq >= 2 -> tx = TX(q[1], q[0]); i = 2           /* reorder */
#endif
       fi;
       /* take the i bundled batches off the queue */
       do
       :: i > 0 -> q[0] = q[1]; q[1] = q[2]; q[2] = q[3]; q[3] = 0; nq--; i--
       :: else -> break
       od;
       checkTx(tx, ok);
       if
       :: ok && (mp[0] == tx || mp[1] == tx) -> skip     /* already in the cache */
       :: ok && mp[0] == NOTX && mp[1] != tx -> mp[0] = tx
       :: ok && mp[0] != NOTX && mp[0] != tx && mp[1] == NOTX -> mp[1] = tx
       :: ok && mp[0] != NOTX && mp[0] != tx && mp[1] != NOTX && mp[1] != tx ->
          ok = 0                                       /* mempool is full */
       :: !ok -> skip
       fi;
       if
       :: ok -> if :: pend[0] == NOTX -> pend[0] = tx :: else -> pend[1] = tx fi;
#ifdef GW_BYZ
          old = tx
#else
          skip
#endif
       :: else -> split(tx)
       fi
     }
  :: atomic { RCPTROOM && nempty(commits) -> commits?tx,ok;
       /* a block as the followed node committed it: receipts come only
        * from committed results */
       i = 0;
       do
       :: i < 2 ->
          if
          :: pend[i] == tx && tx != NOTX ->
             pend[i] = NOTX;
             if
             :: ok -> c = B1(tx); offsetOf(c, o); rcpt[PROD(c)]!c,o;
                if :: B2(tx) != 0 -> c = B2(tx); offsetOf(c, o); rcpt[PROD(c)]!c,o :: else -> skip fi
             :: else -> split(tx)
             fi
          :: else -> skip
          fi;
          i++
       :: else -> break
       od
     }
  :: atomic { RCPTROOM && (pend[0] != NOTX && mp[0] != pend[0] && mp[1] != pend[0] && empty(commits)) ->
       /* resubmitStale: a pending tx left the mempool uncommitted; ask again */
       tx = pend[0]; pend[0] = NOTX; split(tx) }
  :: atomic { RCPTROOM && (pend[1] != NOTX && mp[0] != pend[1] && mp[1] != pend[1] && empty(commits)) ->
       tx = pend[1]; pend[1] = NOTX; split(tx) }
#ifdef GW_BYZ
  :: atomic { old != NOTX && !used -> used = 1; checkTx(old, ok);   /* replay a tx */
       if :: ok && mp[0] == NOTX && mp[1] != old -> mp[0] = old :: else -> skip fi }
#endif
  od
}

/* ---------- the producer SDK (gateway/client) ---------- */
/* One batch in flight per partition; a retry sends the same signed bytes
 * with the same sequence, so it commits at most once. */
proctype Producer(byte me) {
  byte s = 0, mine, rb, off, tries;
  bool sent;
  do
  :: s < NBP(me) ->
     mine = GEN(BASE(me) + s); tries = 0; sent = 0;
     waiting[me] = 1;
#ifdef GW_BYZ
end_wait:
#endif
     do
     :: atomic { !sent && nfull(wire) -> wire!mine; sent = 1 }
     :: atomic { rcpt[me]?rb,off ->
        if
        :: rb == mine && off != REJ ->
#ifndef GW_BYZ
           receipt_in_order = (off == s);              /* sequentiality */
           assert(receipt_in_order);
           /* non-omission: a receipt implies the record is in the log */
           receipt_in_log = (LEN(FOLLOW, me) > off && ENT(FOLLOW, me, off) == mine);
           assert(receipt_in_log);
#endif
#ifndef GW_BYZ
           /* only a correct gateway's receipt is an acknowledgement */
           acked[BID(mine)] = 1; ackoff[BID(mine)] = off;
#endif
           waiting[me] = 0; s++; rb = 0; off = 0;
           break
        :: rb == mine && off == REJ ->
           rejected[me] = 1; waiting[me] = 0; s = NBP(me); break
        :: else -> rb = 0; off = 0              /* an answer to an earlier send */
        fi }
     :: atomic { sent && tries < MAXRETRY && nfull(wire) -> tries++; wire!mine }  /* timeout: the same bytes */
     od
  :: s >= NBP(me) -> break
  od;
#ifndef GW_BYZ
  assert(!rejected[me]);   /* a correct gateway: a genuine batch is never refused */
#endif
  done[me] = 1;
  /* drain late answers to retries, so channels don't block the gateway */
end_drain:
  do :: atomic { rcpt[me]?rb,off -> rb = 0; off = 0 } od
}

/* ---------- a Dolev-Yao intruder on the producer→gateway link ---------- */
/* It reads (ciphertext only under TLS), drops, replays and injects, but
 * cannot make a valid signature: what it makes up is FORGED. A TLS record
 * captured in one session can't be replayed into another, so under TLS it
 * drops and injects only. */
proctype Intruder() {
  byte mem = 0;
  bool dropped = 0, replayed = 0, injected = 0;
end_net:
  do
  :: atomic { nempty(wire) && nfull(gwin) -> wire?c;
       if
       :: gwin!c                                  /* deliver */
       :: !dropped -> dropped = 1                 /* drop */
#ifndef TLS
       :: mem == 0 -> mem = c; intruder_read_payload = 1; gwin!c   /* read the payload, keep a copy */
#endif
       fi }
  :: atomic { mem != 0 && !replayed && nfull(gwin) -> replayed = 1; gwin!mem }
  :: atomic { !injected && nfull(gwin) -> injected = 1; gwin!FORGED(0) }
  od
}

/* confidentiality: the intruder never learns a payload */
active proctype Confidentiality() {
end_conf:
  atomic { intruder_read_payload -> assert(!intruder_read_payload) }
}

init {
  byte ri;
  atomic {
    ri = 0;
    do :: ri < NR -> up[ri] = 1; ri++ :: else -> break od;
    run Consensus();
    run Gateway();
    run Intruder();
    run Producer(0);
    run Producer(1)
  }
}

/* ---------- LTL (run.sh checks each with -a -f, under LIVE) ---------- */
/* deadlock freeness in the strong sense: every submitted batch is
 * eventually committed or rejected */
ltl live { <> (done[0] && done[1]) }
/* parallelism: producers on different partitions both make progress —
 * neither one's batch in flight waits forever while the other runs */
ltl parallel { [] ((waiting[0] -> <> !waiting[0]) && (waiting[1] -> <> !waiting[1])) }
