// SPDX-License-Identifier: MIT
// node-postgres's typical workload, one transcript (see casekit.py for the
// format): simple queries (no values: the simple protocol), parameterized
// ones (an unnamed statement), named queries ({name, text, values}: Parse
// once per connection, then Bind/Execute only).
//   NODE_PATH=.../node_modules node node_client.js HOST PORT DBNAME USER SCHEMA [CASE...]
'use strict';
const { Client, types } = require('pg');
const [host, port, database, user, S, ...only] = process.argv.slice(2);
const CASE_TIMEOUT = Number(process.env.PGCLIENTS_CASE_TIMEOUT || 10) * 1000;
const WORKERS = 4;
const open = [];

types.setTypeParser(1700, (v) => 'numeric ' + v); // numeric: its text, not a float
types.setTypeParser(20, (v) => BigInt(v)); // int8 (count, sum)
BigInt.prototype.toJSON = function () { return this.toString(); };

async function connect() {
  const c = new Client({ host, port: Number(port), database, user,
                         connectionTimeoutMillis: 10000, query_timeout: 60000 });
  open.push(c); // closed after the case (a worker that failed may not have)
  await c.connect();
  return c;
}
const describe = (e) => (e && e.code ? `sqlstate ${e.code}` : `${e && e.name}: ${e && e.message}`);
const rows = (r) => JSON.stringify(r.rows.map((x) => Object.values(x)));
function show(v) {
  if (v === null) return 'null';
  if (Buffer.isBuffer(v)) return `Buffer: ${v.toString('hex')}`;
  if (v instanceof Date) return `Date: ${v.toISOString()}`;
  return `${typeof v}: ${JSON.stringify(v)}`;
}

async function simple(out) {
  const c = await connect();
  out(rows(await c.query("select 1 as a, 'two' as b, null as c")));
  out(rows(await c.query('select g, g * g from generate_series(1, 5) g order by g')));
  const r = await c.query('select 1 as a; select 2 as b');
  out(`multi: ${r.map(rows).join(' ')}`);
  await c.end();
}

async function params(out) {
  const c = await connect();
  out(rows(await c.query('select $1::int + 1 as a, $2::text as b, $3::text as c, $3::text is null as d',
                         [41, 'café ☕ 日本', null])));
  out(rows(await c.query('select $1::text || $2::text as x', ["x'y", '\\z'])));
  await c.end();
}

async function typesCase(out) {
  const c = await connect();
  const r = await c.query(`select 12345.678900::numeric as a, 1e-20::numeric as b, date '2024-02-29' as c,
     timestamp '2024-02-29 13:14:15.123' as d, timestamptz '2024-02-29 13:14:15+02' as e,
     '{"k": [1, 2, null], "é": "ü"}'::json as f, '{"b": 1, "a": 2}'::jsonb as g,
     '\\x00ff10'::bytea as h, true as i, array[1, null, 3] as j, interval '1 day 2 hours' as k,
     null::numeric as l, null::bytea as m`);
  for (const v of Object.values(r.rows[0])) out(show(typeof v === 'object' && v && v.toPostgres ? v.toPostgres() : v));
  const all = Buffer.from([...Array(256).keys()]);
  const p = await c.query('select $1::bytea as a, $2::jsonb as b, $3::timestamptz as c',
                          [all, JSON.stringify({ x: 'é' }), new Date(Date.UTC(2000, 0, 1, 0, 0, 1))]);
  out(`params back: ${p.rows[0].a.equals(all)}, ${JSON.stringify(p.rows[0].b)}, ${p.rows[0].c.toISOString()}`);
  await c.end();
}

async function transactions(out) {
  const c = await connect();
  await c.query(`create table ${S}.n_tx (id int primary key, t text)`);
  await c.query('begin');
  await c.query(`insert into ${S}.n_tx values ($1, $2), ($3, $4)`, [1, 'one', 2, null]);
  await c.query('commit');
  await c.query('begin');
  await c.query(`insert into ${S}.n_tx values (3, 'rolled back')`);
  await c.query('rollback');
  await c.query('begin');
  try { await c.query(`insert into ${S}.n_tx values ($1, 'duplicate')`, [1]); } catch (e) { out(`duplicate: ${describe(e)}`); }
  try { await c.query('select 1'); } catch (e) { out(`after error: ${describe(e)}`); }
  await c.query('rollback');
  await c.query('begin');
  await c.query('savepoint s');
  try { await c.query('select $1::int / 0', [1]); } catch (e) { out(`in savepoint: ${describe(e)}`); }
  await c.query('rollback to savepoint s');
  await c.query(`insert into ${S}.n_tx values (4, 'after savepoint')`);
  await c.query('commit');
  out(rows(await c.query(`select id, t from ${S}.n_tx order by id`)));
  await c.end();
}

async function named(out) {
  const c = await connect();
  let total = 0;
  for (let i = 0; i < 10; i++) {
    const r = await c.query({ name: 'q1', text: 'select $1::int * 3 as v, $2::text as t', values: [i, `é${i}`] });
    total += r.rows[0].v;
  }
  out(`q1 10 times, sum ${total}`);
  await c.query('begin');
  for (let i = 0; i < 5; i++) {
    const r = await c.query({ name: 'q1', text: 'select $1::int * 3 as v, $2::text as t', values: [i, 'x'] });
    total += r.rows[0].v;
  }
  await c.query('commit');
  out(`and 5 in a transaction, sum ${total}`);
  for (let i = 0; i < 3; i++) {
    try { await c.query({ name: 'qerr', text: 'select $1::int / 0', values: [i] }); } catch (e) { out(`qerr ${i}: ${describe(e)}`); }
  }
  const r = await c.query({ name: 'q2', text: 'select count(*) as n from generate_series(1, $1::int)', values: [7] });
  out(`q2: ${rows(r)}`);
  out(`q1 again: ${rows(await c.query({ name: 'q1', text: 'select $1::int * 3 as v, $2::text as t', values: [100, 'y'] }))}`);
  await c.end();
}

async function loop(out) {
  const c = await connect();
  let total = 0;
  for (let i = 0; i < 300; i++) {
    const q = i % 3 === 0 ? { name: `loop${i % 7}`, text: `select $1::int * 2 as v /* ${i % 7} */`, values: [i] }
      : i % 3 === 1 ? { text: 'select $1::int * 2 as v', values: [i] } : { text: `select ${i} * 2 as v` };
    total += (await c.query(q)).rows[0].v;
  }
  out(`300 statements, sum ${total}`);
  await c.end();
}

async function concurrent(out) {
  const setup = await connect();
  await setup.query(`create table ${S}.n_conc (w int, i int, v int)`);
  async function worker(w) {
    const c = await connect();
    try {
      return await rounds(c, w);
    } finally {
      c.end().catch(() => {}); // a failed worker lets go of its server connection at once
    }
  }
  async function rounds(c, w) {
    let bad = 0;
    for (let i = 0; i < 25; i++) {
      // the same names on every connection, each its own text
      await c.query('begin');
      await c.query({ name: 'ins', text: `insert into ${S}.n_conc values ($1, $2, $2 + ${w * 1000})`, values: [w, i] });
      const r = await c.query({ name: 'sel', text: `select v, ${w} as w from ${S}.n_conc where w = $1 and i = $2`, values: [w, i] });
      if (r.rows.length !== 1 || r.rows[0].v !== i + w * 1000 || r.rows[0].w !== w) bad++;
      await c.query('commit');
      const o = await c.query({ name: 'out', text: `select $1::int + ${w} as v`, values: [i] });
      if (o.rows[0].v !== i + w) bad++;
      const p = await c.query({ text: `select $1::int + ${w} as v`, values: [i] });
      if (p.rows[0].v !== i + w) bad++;
    }
    return `worker ${w}: 25 rounds, ${bad} wrong`;
  }
  const res = await Promise.all([...Array(WORKERS).keys()].map((w) => worker(w).catch((e) => `worker ${w}: exception: ${describe(e)}`)));
  res.forEach((l) => out(l));
  out(rows(await setup.query(`select w, count(*), sum(v) from ${S}.n_conc group by w order by w`)));
  await setup.end();
}

const cases = [['simple', simple], ['params', params], ['types', typesCase], ['transactions', transactions],
               ['named', named], ['loop', loop], ['concurrent', concurrent]];

(async () => {
  let timeouts = 0;
  for (const [name, fn] of cases) {
    if (only.length && !only.includes(name)) continue;
    if (timeouts >= 2) { console.log(`== ${name}\nnot run: 2 cases timed out`); continue; }
    const lines = [];
    let timer;
    const timeout = new Promise((resolve) => { timer = setTimeout(() => resolve('timeout'), CASE_TIMEOUT); });
    const r = await Promise.race([fn((l) => lines.push(l)).then(() => 'done', (e) => { lines.push(`exception: ${describe(e)}`); return 'done'; }), timeout]);
    clearTimeout(timer);
    for (const c of open.splice(0)) { c.on('error', () => {}); if (c.connection && c.connection.stream) c.connection.stream.destroy(); }
    console.log(`== ${name}`);
    for (const l of lines) console.log(l);
    if (r === 'timeout') { console.log('timeout'); timeouts++; }
  }
  process.exit(0);
})();
