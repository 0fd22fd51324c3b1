// kafkajs (a popular JavaScript Kafka client) at its defaults against a
// Kafka face: its producer writes N records to TOPIC (no compression, its
// default; the topic is created by Metadata if the face auto-creates), then
// a consumer of group GROUP reads the topic from the beginning (kafkajs
// reads gzip and no compression only, without plugins) until it has N
// records or 60 s pass. Prints one JSON line: what was sent and read.
// Usage: node kafkajs.mjs BROKER TOPIC GROUP N
import { Kafka, logLevel } from "kafkajs";

const [broker, topic, group, nArg] = process.argv.slice(2);
const n = Number(nArg);
const kafka = new Kafka({ clientId: "byzlog-e2e", brokers: [broker], logLevel: logLevel.NOTHING });

const out = { sent: 0, read: [], errors: [] };
const producer = kafka.producer();
try {
  await producer.connect();
  const messages = [];
  for (let i = 0; i < n; i++) messages.push({ key: `k${i}`, value: `kafkajs-${i}` });
  for (let i = 0; i < n; i += 50) {
    await producer.send({ topic, messages: messages.slice(i, i + 50) });
    out.sent += Math.min(50, n - i);
  }
} catch (e) {
  out.errors.push(`produce: ${e.message}`);
} finally {
  await producer.disconnect();
}

const consumer = kafka.consumer({ groupId: group });
try {
  await consumer.connect();
  await consumer.subscribe({ topic, fromBeginning: true });
  await new Promise((resolve, reject) => {
    const timer = setTimeout(resolve, 60000);
    consumer
      .run({
        eachMessage: async ({ partition, message }) => {
          out.read.push({
            partition,
            offset: Number(message.offset),
            key: message.key === null ? null : message.key.toString(),
            value: message.value === null ? null : message.value.toString(),
            timestamp: Number(message.timestamp),
          });
          if (out.read.length >= n) {
            clearTimeout(timer);
            resolve();
          }
        },
      })
      .catch(reject);
  });
} catch (e) {
  out.errors.push(`consume: ${e.message}`);
} finally {
  await consumer.disconnect();
}
console.log(JSON.stringify(out));
