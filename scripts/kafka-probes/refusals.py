"""Refusal probe: what librdkafka at its defaults gets, and how soon, for a
record to an invalid topic name, and how soon a transactional producer's
init_transactions is done. Prints one JSON line: each error (None: none)
and the seconds it took.
Usage: refusals.py BOOTSTRAP [INIT_TIMEOUT_SECONDS]"""
import json
import os
import sys
import time

from confluent_kafka import KafkaException, Producer

# Extra librdkafka properties (security, say), as a JSON object.
extra = json.loads(os.environ.get("KAFKA_CONFIG", "{}"))

bootstrap = sys.argv[1]
out = {}

p = Producer({"bootstrap.servers": bootstrap, "broker.address.family": "v4", **extra})
errors = []
start = time.monotonic()
p.produce("not a topic!", value=b"x", on_delivery=lambda err, msg: errors.append(err))
p.flush(60)
out["invalid_topic"] = {"error": errors[0].name() if errors and errors[0] else None, "seconds": time.monotonic() - start}

t = Producer({"bootstrap.servers": bootstrap, "broker.address.family": "v4", "transactional.id": "probe", **extra})
start = time.monotonic()
err = None
try:
    t.init_transactions(float(sys.argv[2]) if len(sys.argv) > 2 else 60)
except KafkaException as e:
    err = e.args[0]
out["transactional"] = {"error": err.name() if err else None, "fatal": bool(err and err.fatal()),
                        "message": err.str() if err else None, "seconds": time.monotonic() - start}
print(json.dumps(out))
