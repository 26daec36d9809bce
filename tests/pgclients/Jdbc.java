// SPDX-License-Identifier: MIT
// PgJDBC's typical workload, one transcript (see casekit.py for the format):
// a PreparedStatement past prepareThreshold (5: server-prepared, named
// S_n, from its 5th execution), executeBatch of 200 inserts (no
// reWriteBatchedInserts), a fetch-size cursor (a named portal), COPY.
//   java -cp /usr/share/java/postgresql.jar Jdbc.java HOST PORT DBNAME USER SCHEMA [CASE...]
import java.io.StringReader;
import java.io.StringWriter;
import java.sql.*;
import java.util.*;
import java.util.concurrent.*;
import org.postgresql.PGConnection;
import org.postgresql.copy.CopyManager;

public class Jdbc {
	static String url, user, S;
	static final int WORKERS = 4;
	static final long CASE_TIMEOUT = (long) (Double.parseDouble(
		System.getenv().getOrDefault("PGCLIENTS_CASE_TIMEOUT", "10")) * 1000);

	static final List<Connection> open = Collections.synchronizedList(new ArrayList<>());

	interface Case { void run(List<String> out) throws Exception; }

	static Connection connect() throws SQLException {
		Properties p = new Properties();
		p.setProperty("user", user);
		p.setProperty("connectTimeout", "10");
		p.setProperty("socketTimeout", "60");
		Connection c = DriverManager.getConnection(url, p);
		open.add(c); // closed after the case (a worker that failed may not have)
		return c;
	}

	static String describe(Throwable e) {
		if (e instanceof SQLException && ((SQLException) e).getSQLState() != null)
			return "sqlstate " + ((SQLException) e).getSQLState();
		return e.getClass().getSimpleName();
	}

	static String show(Object v) throws SQLException {
		if (v == null) return "null";
		String s;
		if (v instanceof byte[]) {
			StringBuilder b = new StringBuilder("\\x");
			for (byte x : (byte[]) v) b.append(String.format("%02x", x));
			s = b.toString();
		} else if (v instanceof java.sql.Array) {
			s = Arrays.toString((Object[]) ((java.sql.Array) v).getArray());
		} else {
			s = v.toString();
		}
		return v.getClass().getSimpleName() + ": " + s;
	}

	static String rows(ResultSet rs) throws SQLException {
		StringBuilder b = new StringBuilder("[");
		int n = rs.getMetaData().getColumnCount();
		boolean first = true;
		while (rs.next()) {
			b.append(first ? "(" : ", (");
			first = false;
			for (int i = 1; i <= n; i++) b.append(i > 1 ? ", " : "").append(rs.getString(i));
			b.append(")");
		}
		rs.close();
		return b.append("]").toString();
	}

	static void simple(List<String> out) throws Exception {
		try (Connection c = connect(); Statement st = c.createStatement()) {
			out.add(rows(st.executeQuery("select 1 as a, 'two' as b, null as c")));
			out.add(rows(st.executeQuery("select g, g * g from generate_series(1, 5) g order by g")));
			boolean r = st.execute("select 1 as a; select 2 as b");
			StringBuilder b = new StringBuilder("multi:");
			while (r) { b.append(" ").append(rows(st.getResultSet())); r = st.getMoreResults(); }
			out.add(b.toString());
		}
	}

	static void params(List<String> out) throws Exception {
		try (Connection c = connect();
		     PreparedStatement ps = c.prepareStatement("select ?::int + 1, ?::text, ?::text, ?::text is null")) {
			ps.setInt(1, 41);
			ps.setString(2, "café ☕ 日本");
			ps.setNull(3, Types.VARCHAR);
			ps.setNull(4, Types.VARCHAR);
			out.add(rows(ps.executeQuery()));
		}
	}

	static void types(List<String> out) throws Exception {
		try (Connection c = connect(); Statement st = c.createStatement()) {
			ResultSet rs = st.executeQuery("select 12345.678900::numeric, 1e-20::numeric, date '2024-02-29', "
				+ "timestamp '2024-02-29 13:14:15.123456', timestamptz '2024-02-29 13:14:15+02', "
				+ "'{\"k\": [1, 2, null], \"é\": \"ü\"}'::json, '{\"b\": 1, \"a\": 2}'::jsonb, "
				+ "'\\x00ff10'::bytea, true, array[1, null, 3], interval '1 day 2 hours', null::numeric, null::bytea");
			rs.next();
			for (int i = 1; i <= rs.getMetaData().getColumnCount(); i++) out.add(show(rs.getObject(i)));
			rs.close();
			try (PreparedStatement ps = c.prepareStatement("select ?::bytea, ?::numeric, ?::date, ?::timestamp")) {
				byte[] all = new byte[256];
				for (int i = 0; i < 256; i++) all[i] = (byte) i;
				ps.setBytes(1, all);
				ps.setBigDecimal(2, new java.math.BigDecimal("3.14159"));
				ps.setDate(3, java.sql.Date.valueOf("1999-12-31"));
				ps.setTimestamp(4, Timestamp.valueOf("2000-01-01 00:00:01"));
				rs = ps.executeQuery();
				rs.next();
				out.add("params back: " + Arrays.equals(rs.getBytes(1), all) + ", " + rs.getBigDecimal(2)
					+ ", " + rs.getDate(3) + ", " + rs.getTimestamp(4));
			}
		}
	}

	static void transactions(List<String> out) throws Exception {
		try (Connection c = connect(); Statement st = c.createStatement()) {
			st.execute("create table " + S + ".j_tx (id int primary key, t text)");
			c.setAutoCommit(false);
			st.execute("insert into " + S + ".j_tx values (1, 'one'), (2, null)");
			c.commit();
			st.execute("insert into " + S + ".j_tx values (3, 'rolled back')");
			c.rollback();
			try { st.execute("insert into " + S + ".j_tx values (1, 'duplicate')"); }
			catch (SQLException e) { out.add("duplicate: " + describe(e)); }
			try { st.execute("select 1"); }
			catch (SQLException e) { out.add("after error: " + describe(e)); }
			c.rollback();
			st.execute("insert into " + S + ".j_tx values (4, 'before savepoint')");
			Savepoint sp = c.setSavepoint();
			try (PreparedStatement ps = c.prepareStatement("select ?::int / 0")) {
				ps.setInt(1, 1);
				ps.executeQuery();
			} catch (SQLException e) { out.add("in savepoint: " + describe(e)); }
			c.rollback(sp);
			c.commit();
			c.setAutoCommit(true);
			out.add(rows(st.executeQuery("select id, t from " + S + ".j_tx order by id")));
		}
	}

	static void prepared(List<String> out) throws Exception {
		try (Connection c = connect();
		     PreparedStatement ps = c.prepareStatement("select ?::int * 3 as jprep, ?::text as t")) {
			long total = 0;
			for (int i = 0; i < 10; i++) { // server-prepared from the 5th
				ps.setInt(1, i);
				ps.setString(2, "é" + i);
				ResultSet rs = ps.executeQuery();
				rs.next();
				total += rs.getInt(1);
				if (i == 9) out.add("last: " + rs.getString(2));
				rs.close();
			}
			out.add("10 executions, sum " + total);
			c.setAutoCommit(false);
			for (int i = 0; i < 10; i++) {
				ps.setInt(1, i);
				ps.setString(2, "x");
				ResultSet rs = ps.executeQuery();
				rs.next();
				total += rs.getInt(1);
				rs.close();
			}
			c.commit();
			c.setAutoCommit(true);
			out.add("and 10 in a transaction, sum " + total);
			try (PreparedStatement err = c.prepareStatement("select ?::int / 0 as jerr")) {
				for (int i = 0; i < 7; i++) {
					err.setInt(1, i);
					try { err.executeQuery(); } catch (SQLException e) { out.add("error " + i + ": " + describe(e)); }
				}
			}
		}
	}

	static void batch(List<String> out) throws Exception {
		try (Connection c = connect(); Statement st = c.createStatement()) {
			st.execute("create table " + S + ".j_batch (i int, t text)");
			c.setAutoCommit(false);
			try (PreparedStatement ps = c.prepareStatement("insert into " + S + ".j_batch values (?, ?)")) {
				for (int i = 0; i < 200; i++) {
					ps.setInt(1, i);
					ps.setString(2, "r" + i + "é");
					ps.addBatch();
				}
				int[] r = ps.executeBatch();
				out.add("executeBatch: " + r.length + " counts, sum " + Arrays.stream(r).sum());
			}
			c.commit();
			c.setAutoCommit(true);
			try (PreparedStatement ps = c.prepareStatement("insert into " + S + ".j_batch values (?, ?)")) {
				for (int i = 200; i < 400; i++) { // and in autocommit
					ps.setInt(1, i);
					ps.setString(2, "a" + i);
					ps.addBatch();
				}
				out.add("autocommit executeBatch: " + ps.executeBatch().length + " counts");
			}
			out.add(rows(st.executeQuery("select count(*), sum(i), max(t) from " + S + ".j_batch")));
		}
	}

	static void batchUnnamed(List<String> out) throws Exception {
		try (Connection c = connect(); Statement st = c.createStatement()) {
			st.execute("create table " + S + ".j_batchu (i int, t text)");
			for (int n : new int[] {200, 2000}) { // autocommit: commit() would use a named statement
				try (PreparedStatement ps = c.prepareStatement("insert into " + S + ".j_batchu values (?, ?)")) {
					ps.unwrap(org.postgresql.PGStatement.class).setPrepareThreshold(0); // never a named statement
					for (int i = 0; i < n; i++) {
						ps.setInt(1, i);
						ps.setString(2, "u" + i);
						ps.addBatch();
					}
					int[] r = ps.executeBatch(); // one Parse/Bind/Execute per row, one Sync
					out.add("unnamed executeBatch " + n + ": " + r.length + " counts, sum " + Arrays.stream(r).sum());
				}
			}
			out.add(rows(st.executeQuery("select count(*), sum(i) from " + S + ".j_batchu")));
		}
	}

	static void cursor(List<String> out) throws Exception {
		try (Connection c = connect()) {
			c.setAutoCommit(false); // a fetch size needs a transaction: a named portal
			try (PreparedStatement ps = c.prepareStatement("select g from generate_series(1, ?) g order by g")) {
				ps.setFetchSize(100);
				ps.setInt(1, 1000);
				ResultSet rs = ps.executeQuery();
				long n = 0, s = 0;
				while (rs.next()) { n++; s += rs.getInt(1); }
				out.add("fetch size 100: " + n + " rows, sum " + s);
			}
			c.commit();
		}
	}

	static void copy(List<String> out) throws Exception {
		try (Connection c = connect(); Statement st = c.createStatement()) {
			st.execute("create table " + S + ".j_copy (i int, t text)");
			StringBuilder data = new StringBuilder();
			for (int i = 0; i < 1000; i++) data.append(i).append("\tline ").append(i).append(" é\n");
			data.append("1000\t\\N\n");
			CopyManager cm = c.unwrap(PGConnection.class).getCopyAPI();
			out.add("copy in: " + cm.copyIn("copy " + S + ".j_copy from stdin", new StringReader(data.toString())));
			StringWriter w = new StringWriter();
			out.add("copy out: " + cm.copyOut("copy (select * from " + S + ".j_copy order by i) to stdout", w)
				+ ", same: " + w.toString().equals(data.toString()));
			out.add(rows(st.executeQuery("select count(*), count(t) from " + S + ".j_copy")));
		}
	}

	static void loop(List<String> out) throws Exception {
		try (Connection c = connect()) {
			long total = 0;
			for (int i = 0; i < 300; i++) { // the driver's statement cache: server-prepared after 5 uses
				try (PreparedStatement ps = c.prepareStatement("select ?::int * 2 as loop" + (i % 7))) {
					ps.setInt(1, i);
					ResultSet rs = ps.executeQuery();
					rs.next();
					total += rs.getInt(1);
				}
			}
			out.add("300 statements, sum " + total);
		}
	}

	static void concurrent(List<String> out) throws Exception {
		try (Connection c = connect(); Statement st = c.createStatement()) {
			st.execute("create table " + S + ".j_conc (w int, i int, v int)");
			ExecutorService ex = Executors.newFixedThreadPool(WORKERS);
			List<Future<String>> fs = new ArrayList<>();
			for (int w = 0; w < WORKERS; w++) {
				final int W = w;
				fs.add(ex.submit(() -> {
					try (Connection wc = connect()) {
						int bad = 0;
						// the same statement names (S_1, S_2...) on every connection, each its own text
						PreparedStatement ins = wc.prepareStatement("insert into " + S + ".j_conc values (?, ?, ?::int + " + W * 1000 + ")");
						PreparedStatement sel = wc.prepareStatement("select v, " + W + " as w from " + S + ".j_conc where w = ? and i = ?");
						PreparedStatement out1 = wc.prepareStatement("select ?::int + " + W);
						for (int i = 0; i < 25; i++) {
							wc.setAutoCommit(false);
							ins.setInt(1, W); ins.setInt(2, i); ins.setInt(3, i);
							ins.executeUpdate();
							sel.setInt(1, W); sel.setInt(2, i);
							ResultSet rs = sel.executeQuery();
							if (!rs.next() || rs.getInt(1) != i + W * 1000 || rs.getInt(2) != W) bad++;
							rs.close();
							wc.commit();
							wc.setAutoCommit(true);
							out1.setInt(1, i);
							rs = out1.executeQuery();
							if (!rs.next() || rs.getInt(1) != i + W) bad++;
							rs.close();
						}
						return "worker " + W + ": 25 rounds, " + bad + " wrong";
					} catch (Exception e) {
						return "worker " + W + ": exception: " + describe(e);
					}
				}));
			}
			for (Future<String> f : fs) out.add(f.get());
			ex.shutdown();
			out.add(rows(st.executeQuery("select w, count(*), sum(v) from " + S + ".j_conc group by w order by w")));
		}
	}

	public static void main(String[] a) throws Exception {
		url = "jdbc:postgresql://" + a[0] + ":" + a[1] + "/" + a[2];
		user = a[3];
		S = a[4];
		Set<String> only = new HashSet<>(Arrays.asList(a).subList(5, a.length));
		LinkedHashMap<String, Case> cases = new LinkedHashMap<>();
		cases.put("simple", Jdbc::simple);
		cases.put("params", Jdbc::params);
		cases.put("types", Jdbc::types);
		cases.put("transactions", Jdbc::transactions);
		cases.put("prepared", Jdbc::prepared);
		cases.put("batch", Jdbc::batch);
		cases.put("batch_unnamed", Jdbc::batchUnnamed);
		cases.put("cursor", Jdbc::cursor);
		cases.put("copy", Jdbc::copy);
		cases.put("loop", Jdbc::loop);
		cases.put("concurrent", Jdbc::concurrent);
		ExecutorService ex = Executors.newCachedThreadPool(r -> { Thread t = new Thread(r); t.setDaemon(true); return t; });
		int timeouts = 0;
		for (Map.Entry<String, Case> e : cases.entrySet()) {
			if (!only.isEmpty() && !only.contains(e.getKey())) continue;
			if (timeouts >= 2) { System.out.println("== " + e.getKey() + "\nnot run: 2 cases timed out"); continue; }
			List<String> out = Collections.synchronizedList(new ArrayList<>());
			Future<?> f = ex.submit(() -> {
				try { e.getValue().run(out); }
				catch (Exception x) { out.add("exception: " + describe(x)); }
			});
			boolean timedOut = false;
			try { f.get(CASE_TIMEOUT, TimeUnit.MILLISECONDS); }
			catch (TimeoutException x) { timedOut = true; }
			System.out.println("== " + e.getKey());
			synchronized (out) { for (String l : out) System.out.println(l); }
			if (timedOut) { System.out.println("timeout"); timeouts++; }
			List<Connection> cs;
			synchronized (open) { cs = new ArrayList<>(open); open.clear(); }
			if (!timedOut) for (Connection c : cs) try { c.close(); } catch (SQLException x) { }
			System.out.flush();
		}
		System.exit(0);
	}
}
