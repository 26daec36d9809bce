// SPDX-License-Identifier: MIT
// A SCRAM login through pgproxy with node-postgres (tests/pgproxy_auth.sh):
// prints "user NAME" or "refused SQLSTATE: ...".
// usage: node login.js PORT USER PASSWORD DATABASE (NODE_PATH: where pg is)
const { Client } = require('pg');
const [port, user, password, database] = process.argv.slice(2);
const ca = process.env.PGCLIENT_SSLROOTCERT; // TLS only, the certificate checked against it
(async () => {
	const c = new Client({ host: '127.0.0.1', port: Number(port), user, password, database,
			       ssl: ca ? { ca: require('fs').readFileSync(ca), rejectUnauthorized: true } : false,
			       connectionTimeoutMillis: 10000 });
	try {
		await c.connect();
		const r = await c.query('select current_user as u');
		console.log('user ' + r.rows[0].u);
		await c.end();
	} catch (e) {
		console.log('refused ' + (e.code || 'none') + ': ' + e.message);
	}
})();
