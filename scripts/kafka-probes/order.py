"""Order probe: librdkafka's producer at its defaults (not idempotent,
several requests in flight, linger 5 ms) writes N records to one partition,
spread over SECONDS (default 0: as fast as it can), so that its requests
follow each other while earlier ones wait for their block. Prints one JSON
line: how many were delivered and the delivery errors.
Usage: order.py BOOTSTRAP TOPIC PARTITION N [SECONDS]"""
import json
import os
import sys
import time

from confluent_kafka import Producer

# Extra librdkafka properties (security, say), as a JSON object.
extra = json.loads(os.environ.get("KAFKA_CONFIG", "{}"))

bootstrap, topic, partition, n = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
spread = float(sys.argv[5]) if len(sys.argv) > 5 else 0.0
p = Producer({"bootstrap.servers": bootstrap, "broker.address.family": "v4", **extra})
delivered, errors = 0, []


def report(err, msg):
    global delivered
    if err is not None:
        errors.append(str(err))
    else:
        delivered += 1


start = time.monotonic()
for i in range(n):
    if spread > 0:
        ahead = start + spread * i / n - time.monotonic()
        if ahead > 0:
            time.sleep(ahead)
    while True:
        try:
            p.produce(topic, value=str(i).encode(), partition=partition, on_delivery=report)
            break
        except BufferError:
            p.poll(0.05)
    p.poll(0)
left = p.flush(120)
print(json.dumps({"delivered": delivered, "errors": errors[:10], "undelivered": left}))
