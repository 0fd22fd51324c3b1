/*
 * txn.pml: Kafka transactions decided by the chain (issue 48), checked
 * with spin by run.sh beside byzlog.pml. The model comes before the build:
 * it is the design the chain and the Kafka face will follow.
 *
 * One transactional id, two partitions (0 and 1). The chain keeps the
 * id's producer epoch and its open transaction (the partitions it wrote,
 * when it started); every step is a transaction in a block, applied whole:
 *   init     InitProducerId: the epoch goes up by one, which fences every
 *            older producer of the id; an open transaction of an older
 *            epoch is aborted in the same block.
 *   produce  a transactional batch of the current epoch, appended to its
 *            partition's log; the first one starts the transaction (its
 *            block time is the start) and adds the partition to it.
 *   end      EndTxn, commit or abort, of the current epoch: a marker is
 *            appended to every partition of the transaction, all in the
 *            one block, and the transaction is over.
 *   expire   at each block, a transaction open longer than its timeout
 *            (by block time, from its start) is aborted as end would, and
 *            the epoch goes up (its producer is fenced, as Kafka fences a
 *            producer whose transaction timed out).
 * Producers (two incarnations of the id's producer, each starting with
 * init, so the second is the first's successor and the first may live on
 * as a zombie) write to one or both partitions, any write may be lost on
 * the way (a gateway that drops it), and then commit, abort or stall
 * forever. A read_committed consumer reads each partition up to its last
 * stable offset (LSO: the first offset of the open transaction's records
 * there, or the log's end), and of the records below it only those whose
 * transaction committed (Kafka's aborted-transactions list).
 *
 * Properties, in every reachable state (the monitor) or where a step
 * happens (assertions in the chain):
 *   aborted-read  the consumer never reads a record of a transaction that
 *                 aborted (or aborts later).
 *   torn-read     once the consumer read a transaction's records in one
 *                 partition, its records in the other are readable: a
 *                 transaction becomes visible everywhere in one block.
 *   fence         no record of an epoch lands after that epoch's marker in
 *                 a partition (a zombie writes nothing after its fence),
 *                 and a transaction commits only if its own producer asked.
 *   timeout       no transaction commits later than its timeout, and at
 *                 the end no transaction is left open (a stalled producer's
 *                 is aborted by block time, so no LSO is held forever).
 *
 * Settings (-D):
 *   MUT_MARKER_RACE  end writes each partition's marker in its own step, as
 *                    Kafka's coordinator sends markers to each partition
 *                    leader: a reader between them sees half a transaction.
 *   MUT_NO_FENCE     the chain does not check the epoch of produce and end.
 *   MUT_NO_TIMEOUT   the chain neither expires transactions nor checks the
 *                    deadline at end.
 *   MUT_NO_EXPIRE    the chain checks the deadline at end but never expires
 *                    a transaction: a stalled producer's stays open.
 *   MUT_NO_LSO       the consumer reads to the log's end, taking records of
 *                    open transactions (read_committed without the LSO).
 */

#define NPROD    2    /* producer incarnations */
#define NE       4    /* epochs: one per init, one more per expiry */
#define LOGMAX   8
#define TIMEOUT  1    /* block-time units a transaction may stay open */
#define TSTART   2    /* the last block time a producer starts at */
#define TMAX     4    /* TSTART + TIMEOUT + 1: every transaction can expire */

#define NONE   0
#define DATA   1
#define COMMIT 2
#define ABORT  3

/* the partitions' logs: kind and epoch of each entry */
byte kind0[LOGMAX]; byte ep0[LOGMAX]; byte len0 = 0;
byte kind1[LOGMAX]; byte ep1[LOGMAX]; byte len1 = 0;

/* the chain's state of the transactional id */
byte epoch = 0;          /* the current epoch (valid once inits > 0) */
byte inits = 0;
bool ongoing = false;    /* a transaction is open */
byte txnEp;              /* its epoch */
byte started;            /* its start (block time) */
bool in0, in1;           /* the partitions it wrote */
byte first0, first1;     /* its first offset in each */
byte now = 0;            /* block time */

/* what happened, for the properties (index: partition * NE + epoch) */
byte outcome[NE];        /* NONE, COMMIT or ABORT of each epoch's transaction */
byte decided[NE];        /* what each epoch's producer asked at end */
bool hasData[2 * NE];
byte marker[2 * NE];     /* the marker of each epoch's transaction in a partition */
bool read[2 * NE];       /* the consumer read a record of it there */

byte prodDone = 0;
bool clockDone = false;

#define lso0 (ongoing && in0 -> first0 : len0)
#define lso1 (ongoing && in1 -> first1 : len1)

/* a marker of kind k for the open transaction in partition p */
inline mark0(k) {
  if
  :: in0 -> assert(len0 < LOGMAX); kind0[len0] = k; ep0[len0] = txnEp; len0++; marker[txnEp] = k; in0 = false
  :: else -> skip
  fi
}
inline mark1(k) {
  if
  :: in1 -> assert(len1 < LOGMAX); kind1[len1] = k; ep1[len1] = txnEp; len1++; marker[NE + txnEp] = k; in1 = false
  :: else -> skip
  fi
}

/* the properties broken, each named for pan's report */
bool zombieWrite, foreignCommit, lateCommit, leftOpen, abortedRead, tornRead;

/* the transaction is over with outcome k (its markers written) */
inline over(k) {
  outcome[txnEp] = k;
  ongoing = false
}

/* the chain decides to end the open transaction with k */
inline decide(k) {
  /* fence: a transaction commits only if its own producer asked */
  foreignCommit = (k == COMMIT && decided[txnEp] != COMMIT);
  assert(!foreignCommit);
  /* timeout: never committed after its timeout */
  lateCommit = (k == COMMIT && now > started + TIMEOUT);
  assert(!lateCommit)
}

/* end the open transaction with k in one block (or, under
 * MUT_MARKER_RACE, partition 0's marker now and the rest in a later step,
 * by MarkerWriter) */
#ifdef MUT_MARKER_RACE
byte pending = NONE;
#define settled (pending == NONE)
inline endAll(k) {
  decide(k);
  mark0(k);
  pending = k
}

active proctype MarkerWriter() {
  do
  :: atomic { pending != NONE -> mark1(pending); over(pending); pending = NONE }
  :: atomic { clockDone && prodDone == NPROD && pending == NONE -> break }
  od
}
#else
#define settled true
inline endAll(k) {
  decide(k);
  mark0(k);
  mark1(k);
  over(k)
}
#endif

/* InitProducerId: a new epoch; an older epoch's open transaction aborts */
inline chainInit(e) {
  atomic {
    if
    :: inits > 0 -> epoch++
    :: else -> skip
    fi;
    inits++;
    e = epoch;
    if
    :: ongoing -> mark0(ABORT); mark1(ABORT); over(ABORT)
    :: else -> skip
    fi
  }
}

/* a transactional batch of epoch e for partition p; ok says it landed */
inline chainProduce(e, p, ok) {
  atomic {
    ok = false;
    if
    :: now > TSTART -> skip                /* too late to expire within the run */
#ifndef MUT_NO_FENCE
    :: now <= TSTART && e != epoch -> skip /* fenced: refused */
#endif
    :: else ->
       /* fence: nothing of an epoch after its marker */
       zombieWrite = (marker[p * NE + e] != NONE);
       assert(!zombieWrite);
       if
       :: !ongoing -> ongoing = true; txnEp = e; started = now
       :: else -> skip
       fi;
       if
       :: p == 0 ->
          if :: !in0 -> in0 = true; first0 = len0 :: else -> skip fi;
          assert(len0 < LOGMAX); kind0[len0] = DATA; ep0[len0] = e; len0++
       :: else ->
          if :: !in1 -> in1 = true; first1 = len1 :: else -> skip fi;
          assert(len1 < LOGMAX); kind1[len1] = DATA; ep1[len1] = e; len1++
       fi;
       hasData[p * NE + e] = true;
       ok = true
    fi
  }
}

/* EndTxn of epoch e: commit or abort */
inline chainEnd(e, k) {
  atomic {
    decided[e] = k;
    if
#ifndef MUT_NO_FENCE
    :: e != epoch -> skip                  /* fenced: refused */
#endif
    :: !ongoing -> skip                    /* nothing open: refused */
#ifdef MUT_MARKER_RACE
    :: pending != NONE -> skip             /* still writing markers */
#endif
#ifndef MUT_NO_TIMEOUT
    :: ongoing && now > started + TIMEOUT -> skip  /* expired: refused */
#endif
    :: else -> endAll(k)
    fi
  }
}

proctype Producer() {
  byte e;
  bool ok, lost = false;
  if
  :: now <= TSTART ->
     chainInit(e);
     /* write to partition 0, 1 or both; a write may be lost */
     if
     :: chainProduce(e, 0, ok); lost = lost || !ok
     :: lost = true
     :: skip
     fi;
     if
     :: chainProduce(e, 1, ok); lost = lost || !ok
     :: lost = true
     :: skip
     fi;
     if
     :: !lost -> chainEnd(e, COMMIT)
     :: chainEnd(e, ABORT)
     :: skip                               /* stalls: never ends it */
     fi
  :: else -> skip                          /* started too late to matter */
  fi;
  prodDone++
}

/* block time; each block first aborts a transaction past its timeout */
active proctype Clock() {
  do
  :: atomic {
       now < TMAX ->
       now++;
#if !defined(MUT_NO_TIMEOUT) && !defined(MUT_NO_EXPIRE)
       if
       :: ongoing && now > started + TIMEOUT ->
          mark0(ABORT); mark1(ABORT); over(ABORT);
          epoch++                          /* its producer is fenced */
       :: else -> skip
       fi
#endif
     }
  :: now == TMAX -> break
  od;
  clockDone = true
}

/* a read_committed consumer of both partitions */
#ifdef MUT_NO_LSO
#define stable0 len0
#define stable1 len1
#else
#define stable0 lso0
#define stable1 lso1
#endif

/* the consumer takes a data record of epoch x in partition p if its
 * transaction committed there (below the LSO its marker is written);
 * under MUT_NO_LSO, also if it has no marker yet */
#ifdef MUT_NO_LSO
#define takes(p, x) (marker[(p) * NE + (x)] != ABORT)
#else
#define takes(p, x) (marker[(p) * NE + (x)] == COMMIT)
#endif

active proctype Consumer() {
  byte pos0 = 0, pos1 = 0;
  do
  :: atomic {
       pos0 < stable0 ->
       if
       :: kind0[pos0] == DATA && takes(0, ep0[pos0]) -> read[ep0[pos0]] = true
       :: else -> skip
       fi;
       pos0++
     }
  :: atomic {
       pos1 < stable1 ->
       if
       :: kind1[pos1] == DATA && takes(1, ep1[pos1]) -> read[NE + ep1[pos1]] = true
       :: else -> skip
       fi;
       pos1++
     }
  :: atomic { clockDone && prodDone == NPROD && settled && pos0 == stable0 && pos1 == stable1 -> break }
  od;
  /* timeout: nothing is left open, so no LSO is held forever */
  leftOpen = ongoing;
  assert(!leftOpen)
}

init {
  atomic {
    run Producer();
    run Producer()
  }
}

/* aborted-read and torn-read, for epoch x */
#define noAbortedRead(x) ((!read[x] || outcome[x] != ABORT) && (!read[NE + x] || outcome[x] != ABORT))
#define noTornRead(x) ((!read[x] || !hasData[NE + x] || marker[NE + x] == COMMIT) && (!read[NE + x] || !hasData[x] || marker[x] == COMMIT))

active proctype Monitor() {
  atomic {
    abortedRead = !(noAbortedRead(0) && noAbortedRead(1) && noAbortedRead(2) && noAbortedRead(3));
    tornRead = !(noTornRead(0) && noTornRead(1) && noTornRead(2) && noTornRead(3));
    assert(!abortedRead);
    assert(!tornRead)
  }
}
