-- SPDX-License-Identifier: MIT
-- max_server_conns(who): the most server connections a proxy had at once,
-- sampled every 2 ms from a direct session until a row appears in
-- sample_stop (a plpgsql loop: no gap between samples).  A proxy's
-- connections are the client backends of user who, or (who null) those not
-- named "direct".  Used by tests/pglib.sh and scripts/proxy-bench-lib.sh.
create table sample_stop ();
create function max_server_conns(who text) returns int language plpgsql as $$
declare m int := 0; n int;
begin
	loop
		perform pg_stat_clear_snapshot();
		select count(*) into n from pg_stat_activity
			where backend_type = 'client backend'
			  and (usename = who or (who is null and application_name <> 'direct'));
		m := greatest(m, n);
		exit when exists (select from sample_stop);
		perform pg_sleep(0.002);
	end loop;
	return m;
end $$;
