#!/usr/bin/env node
// Bee-Queue's side of the side-by-side benchmark (run.py drives it; see README.md).
//
//   node bee.js enqueue-single N [--url URL] [--defaults]
//   node bee.js enqueue-bulk N   [--url URL] [--defaults]
//   node bee.js process N        [--url URL] [--defaults]
//
// The Redis URL comes from --url, else from REDIS_URL.  It prints one JSON line on stdout (the
// figure: jobs, seconds, jobs_per_s) and nothing else; errors go to stderr with exit status 1.
// --defaults runs Bee-Queue with every setting at its default (README.md: "Settings").
'use strict';

const Queue = require('bee-queue');

const QUEUE = 'bench';
const CHUNK = 1000;
const CONCURRENCY = 50;
const MODES = ['enqueue-single', 'enqueue-bulk', 'process'];

function fail(message) {
  process.stderr.write(`bee.js: ${message}\n`);
  process.exit(1);
}

function parse(argv) {
  const positional = [];
  let url = process.env.REDIS_URL;
  let defaults = false;
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '--url') {
      url = argv[++i];
    } else if (argv[i] === '--defaults') {
      defaults = true;
    } else {
      positional.push(argv[i]);
    }
  }
  const [mode, count] = positional;
  const jobs = Number(count);
  if (positional.length !== 2 || !MODES.includes(mode)) {
    fail(`usage: node bee.js {${MODES.join('|')}} N [--url URL] [--defaults]`);
  }
  if (!Number.isSafeInteger(jobs) || jobs < 1) fail(`N must be a positive integer, not ${count}`);
  if (!url) fail('no Redis URL: pass --url redis://HOST:PORT/DB or set REDIS_URL');
  return { mode, jobs, url, defaults };
}

// Nothing here listens to job events from other processes, and blamequeue's producer and
// worker subscribe to none either: so, as Bee-Queue's own documentation advises for such a
// queue, it neither subscribes to them (getEvents) nor keeps Job objects to route them to
// (storeJobs), and a producer opens no worker connection (isWorker).  Everything else keeps its
// default: the worker publishes an event per finished job (sendEvents) and keeps each finished
// job in Redis (removeOnSuccess: false), as blamequeue keeps done jobs for `retain_done`.
function settings(url, worker, defaults) {
  if (defaults) return { redis: { url } };
  return { redis: { url }, isWorker: worker, getEvents: false, storeJobs: false };
}

function report(jobs, seconds) {
  const figure = { jobs, seconds: Number(seconds.toFixed(6)), jobs_per_s: Math.round((jobs / seconds) * 10) / 10 };
  process.stdout.write(JSON.stringify(figure) + '\n');
}

function now() {
  return Number(process.hrtime.bigint()) / 1e9;
}

async function enqueueSingle(queue, jobs) {
  const started = now();
  for (let i = 0; i < jobs; i++) {
    await queue.createJob({ i }).save();
  }
  return now() - started;
}

async function enqueueBulk(queue, jobs) {
  const started = now();
  for (let start = 0; start < jobs; start += CHUNK) {
    const chunk = [];
    for (let i = start; i < Math.min(jobs, start + CHUNK); i++) {
      chunk.push(queue.createJob({ i }));
    }
    const errors = await queue.saveAll(chunk);
    if (errors.size > 0) {
      const [first] = errors.values();
      throw new Error(`${errors.size} of ${chunk.length} jobs not saved: ${first}`);
    }
  }
  return now() - started;
}

// From the first job's start to the last job's completion (the worker's 'succeeded' event,
// emitted once the job's finished state is written to Redis).
function processJobs(queue, jobs) {
  return new Promise((resolve, reject) => {
    let firstStart = null;
    let done = 0;
    queue.on('succeeded', () => {
      done += 1;
      if (done === jobs) resolve(now() - firstStart);
    });
    queue.on('failed', (job, err) => reject(new Error(`job ${job.id} failed: ${err}`)));
    queue.on('error', reject);
    queue.process(CONCURRENCY, async () => {
      if (firstStart === null) firstStart = now();
    });
  });
}

async function main() {
  const { mode, jobs, url, defaults } = parse(process.argv.slice(2));
  const queue = new Queue(QUEUE, settings(url, mode === 'process', defaults));
  await queue.ready();
  let seconds;
  if (mode === 'enqueue-single') {
    seconds = await enqueueSingle(queue, jobs);
  } else if (mode === 'enqueue-bulk') {
    seconds = await enqueueBulk(queue, jobs);
  } else {
    seconds = await processJobs(queue, jobs);
  }
  report(jobs, seconds);
  await queue.close();
}

main().catch((err) => fail(err && err.stack ? err.stack : String(err)));
