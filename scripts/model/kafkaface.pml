/*
 * kafkaface.pml: the Kafka face's order on one connection (issue 45),
 * checked with spin by run.sh beside byzlog.pml.
 *
 * A Kafka client sends NR requests on one connection, in order, each one
 * batch for the same partition (or one offset commit of the same group:
 * the same stream, with the key's nonce for the sequence). A plain Kafka
 * producer carries no sequence: the face takes the next one of its stream
 * (gateway/kafka/sequence.go; commit.go's nonces for commits) and submits
 * the batch; the chain writes a stream's batches in sequence order and
 * only the next one (a gap waits, or times out; a sequence below the next
 * is refused as reused); any batch may also be refused outright (nothing
 * written: a full block, an expired transaction). After a failure the face
 * reads the chain's next sequence again.
 *
 * Property (order): two requests both acknowledged OK are stored in the
 * order they were sent. Checked for every interleaving and every choice of
 * refusals, at the end of every run (an invalid end state is a deadlock).
 *
 * Settings (-D):
 *   MUT_RACE    each request is started on its own goroutine, as the face
 *               did before (conn.go `go c.finish`): requests race for the
 *               stream's sequences.
 *   MUT_REREAD  after a failure the face reads the chain's next sequence at
 *               once, while batches it signed after the failed one are still
 *               in flight (the nonces bug e2e found: a read before they
 *               settle hands out a sequence one of them holds).
 */

#define NR 3

#define UNSENT  0
#define PENDING 1
#define OK      2
#define FAILED  3

byte seqOf[NR];
byte state[NR];
byte offsetOf[NR];

byte next = 0;       /* the chain's next sequence of the stream */
byte logLen = 0;     /* records in the partition */

/* the face's sequencer for the stream */
byte fnext = 0;
bool known = true;
byte inflight = 0;

byte started = 0;    /* requests whose start is done */
bool readerDone = false;

/* take a sequence and submit request i: what start does, in request order */
inline start(i) {
  atomic {
#ifndef MUT_REREAD
    (known || inflight == 0);   /* after a failure, wait for the in-flight ones */
#endif
    if
    :: !known -> fnext = next; known = true
    :: else -> skip
    fi;
    seqOf[i] = fnext;
    fnext++;
    inflight++;
    state[i] = PENDING;
    started++
  }
}

#ifdef MUT_RACE
proctype Handler(byte i) {
  start(i)
}
#endif

/* the connection's reader: reads requests in order and starts each */
active proctype Reader() {
  byte i = 0;
  do
  :: i < NR ->
#ifdef MUT_RACE
     run Handler(i);
#else
     start(i);
#endif
     i++
  :: else -> break
  od;
  readerDone = true
}

/* the answer of request j: the face's answered callback */
inline answer(j, ok) {
  if
  :: ok -> state[j] = OK
  :: !ok -> state[j] = FAILED; known = false
  fi;
  inflight--
}

/* decide pending request j: write it, refuse it, or leave it waiting */
inline decide(j) {
  if
  :: seqOf[j] == next ->
     if
     :: true -> offsetOf[j] = logLen; logLen++; next++; answer(j, true)
     :: true -> answer(j, false)          /* refused: nothing written */
     fi
  :: seqOf[j] < next -> answer(j, false)  /* sequence reused */
  :: seqOf[j] > next -> answer(j, false)  /* a gap that timed out */
  fi
}

/* the gateway and the chain: decide pending requests in any order */
active proctype Chain() {
  do
  :: atomic { state[0] == PENDING -> decide(0) }
  :: atomic { state[1] == PENDING -> decide(1) }
  :: atomic { state[2] == PENDING -> decide(2) }
  :: atomic { readerDone && started == NR && state[0] != PENDING && state[1] != PENDING && state[2] != PENDING -> break }
  od;
  /* order: acknowledged requests are stored in the order sent */
  assert(!(state[0] == OK && state[1] == OK) || offsetOf[0] < offsetOf[1]);
  assert(!(state[0] == OK && state[2] == OK) || offsetOf[0] < offsetOf[2]);
  assert(!(state[1] == OK && state[2] == OK) || offsetOf[1] < offsetOf[2])
}
