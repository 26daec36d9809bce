// SPDX-License-Identifier: MIT
// A SCRAM login through pgproxy with PgJDBC (tests/pgproxy_auth.sh runs it
// as a single source file): prints "user NAME" or "refused SQLSTATE: ...".
// usage: java -cp postgresql.jar Login.java PORT USER PASSWORD DATABASE
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.util.Properties;

public class Login {
	public static void main(String[] a) throws Exception {
		Properties p = new Properties();
		p.setProperty("user", a[1]);
		p.setProperty("password", a[2]);
		String ca = System.getenv("PGCLIENT_SSLROOTCERT"); // TLS only, verify-full
		p.setProperty("sslmode", ca != null ? "verify-full" : "disable");
		if (ca != null)
			p.setProperty("sslrootcert", ca);
		p.setProperty("connectTimeout", "10");
		try (Connection c = DriverManager.getConnection("jdbc:postgresql://127.0.0.1:" + a[0] + "/" + a[3], p);
		     ResultSet r = c.createStatement().executeQuery("select current_user")) {
			r.next();
			System.out.println("user " + r.getString(1));
		} catch (SQLException e) {
			System.out.println("refused " + e.getSQLState() + ": " + e.getMessage());
		}
	}
}
