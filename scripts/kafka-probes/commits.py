"""Commit probe: a librdkafka consumer at its defaults reads N records of one
partition and commits each one's next offset asynchronously (1..N), then
reads the committed offset back, from itself and from a fresh consumer of
the group. Prints one JSON line.
Usage: commits.py BOOTSTRAP TOPIC PARTITION N GROUP"""
import json
import os
import sys

from confluent_kafka import Consumer, TopicPartition

# Extra librdkafka properties (security, say), as a JSON object.
extra = json.loads(os.environ.get("KAFKA_CONFIG", "{}"))

bootstrap, topic, partition, n, group = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5]
done, errors, order = [], [], []


def on_commit(err, partitions):
    if err is not None:
        errors.append(str(err))
    for tp in partitions:
        if tp.error is not None:
            errors.append(str(tp.error))
        order.append(tp.offset)
    done.append(1)


conf = {"bootstrap.servers": bootstrap, "group.id": group, "enable.auto.commit": False,
        "broker.address.family": "v4", "on_commit": on_commit, **extra}
c = Consumer(conf)
# Wait for the group coordinator before committing: librdkafka defers the
# commits made while its coordinator connection comes up and sends those
# made at the moment it is up ahead of them (rdkafka_cgrp.c re-queues the
# deferred ones behind), so an older offset would land last against any
# broker. The probe is about the broker keeping the order it is sent.
c.committed([TopicPartition(topic, partition)], timeout=30)
c.assign([TopicPartition(topic, partition, 0)])
read = 0
while read < n:
    m = c.poll(10)
    if m is None:
        break
    if m.error() is not None:
        errors.append(str(m.error()))
        continue
    read += 1
    c.commit(message=m, asynchronous=True)
while len(done) < read:
    c.poll(0.2)
own = c.committed([TopicPartition(topic, partition)], timeout=30)[0].offset
c.close()
fresh = Consumer({k: v for k, v in conf.items() if k != "on_commit"})
again = fresh.committed([TopicPartition(topic, partition)], timeout=30)[0].offset
fresh.close()
print(json.dumps({"read": read, "callbacks": len(done), "callback_offsets_in_order": order == sorted(order),
                  "committed": own, "committed_fresh": again, "errors": errors[:10]}))
