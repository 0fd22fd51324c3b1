"""Null probe (librdkafka tests 0070, 0073 and 0099): librdkafka at its
defaults writes records with empty and null keys, values and header
values, reads them back, and commits an offset past the partition's end.
Prints one JSON line: each record as read (None stays null, b"" is "").
Usage: nulls.py BOOTSTRAP TOPIC PARTITION GROUP"""
import json
import os
import sys

from confluent_kafka import Consumer, Producer, TopicPartition

# Extra librdkafka properties (security, say), as a JSON object.
extra = json.loads(os.environ.get("KAFKA_CONFIG", "{}"))

bootstrap, topic, partition, group = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
sent = [
    {"key": b"", "value": b"", "headers": [("e", b""), ("n", None)]},
    {"key": None, "value": None, "headers": None},
    {"key": b"k", "value": b"v", "headers": [("h", b"x")]},
]
p = Producer({"bootstrap.servers": bootstrap, "broker.address.family": "v4", **extra})
errors = []
for r in sent:
    p.produce(topic, key=r["key"], value=r["value"], headers=r["headers"], partition=partition,
              on_delivery=lambda err, msg: err and errors.append(str(err)))
p.flush(60)


def show(b):
    return None if b is None else b.decode()


c = Consumer({"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
              "broker.address.family": "v4", **extra})
c.assign([TopicPartition(topic, partition, 0)])
read = []
while len(read) < len(sent):
    m = c.poll(10)
    if m is None:
        break
    if m.error() is not None:
        errors.append(str(m.error()))
        continue
    read.append({"key": show(m.key()), "value": show(m.value()),
                 "headers": [[k, show(v)] for k, v in (m.headers() or [])]})
commit_err = None
try:
    c.commit(offsets=[TopicPartition(topic, partition, 1000)], asynchronous=False)
except Exception as e:  # the error is what the probe reports
    commit_err = str(e)
committed = c.committed([TopicPartition(topic, partition)], timeout=30)[0].offset
c.close()
print(json.dumps({"read": read, "errors": errors, "commit_error": commit_err, "committed": committed}))
