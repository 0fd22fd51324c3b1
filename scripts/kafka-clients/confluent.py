"""librdkafka's Python client (confluent-kafka, from Debian) at its defaults
against a Kafka face: a producer writes N records to TOPIC (created by
Metadata if the face auto-creates; librdkafka's producers allow it), then a
consumer of group GROUP reads the topic from the beginning until it has N
records or 60 s pass. Prints one JSON line: what was sent and read.
Usage: confluent.py BROKER TOPIC GROUP N"""
import json
import sys
import time

from confluent_kafka import Consumer, Producer, TIMESTAMP_CREATE_TIME

broker, topic, group, n = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
out = {"sent": 0, "read": [], "errors": []}


def report(err, msg):
    if err is not None:
        out["errors"].append("produce: %s" % err)
    else:
        out["sent"] += 1


p = Producer({"bootstrap.servers": broker, "broker.address.family": "v4"})
for i in range(n):
    p.produce(topic, key=b"k%d" % i, value=b"confluent-%d" % i, on_delivery=report)
    p.poll(0)
p.flush(60)

c = Consumer({"bootstrap.servers": broker, "broker.address.family": "v4", "group.id": group,
              "auto.offset.reset": "earliest"})
c.subscribe([topic])
deadline = time.monotonic() + 60
while len(out["read"]) < n and time.monotonic() < deadline:
    m = c.poll(1.0)
    if m is None:
        continue
    if m.error():
        out["errors"].append("consume: %s" % m.error())
        continue
    kind, ts = m.timestamp()
    out["read"].append({"partition": m.partition(), "offset": m.offset(),
                        "key": None if m.key() is None else m.key().decode(),
                        "value": None if m.value() is None else m.value().decode(),
                        "timestamp": ts if kind == TIMESTAMP_CREATE_TIME else -ts})
c.close()
print(json.dumps(out))
