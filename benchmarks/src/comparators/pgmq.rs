//! pgmq, installed as plain SQL from the script the `pgmq` crate embeds: pgmq.send /
//! send_batch, pgmq.read(queue, vt, qty), pgmq.delete (one id or an array); waiting workers
//! call pgmq.read_with_poll with its defaults (5 s, polling every 100 ms inside the server).

use std::time::Duration;

use anyhow::Result;
use postgres::{CancelToken, Client, Statement};

use super::{ids_only, load_in_chunks, Claimed, Comparator, Producer, StatementProducer, Worker};

pub const QUEUE: &str = "bench";
/// Visibility timeout of a read, in seconds: the lease.
const VT: i32 = 30;

pub struct Pgmq;

struct PgmqWorker {
    conn: Client,
    read: Statement,
    read_with_poll: Statement,
    delete_one: Statement,
    delete_many: Statement,
    set_vt: Statement,
}

impl Worker for PgmqWorker {
    fn claim(&mut self, n: i32) -> Result<Vec<Claimed>> {
        Ok(ids_only(self.conn.query(&self.read, &[&n])?))
    }

    fn complete(&mut self, jobs: &[Claimed]) -> Result<()> {
        if let [job] = jobs {
            self.conn.query_one(&self.delete_one, &[&job.id])?;
        } else if !jobs.is_empty() {
            let ids: Vec<i64> = jobs.iter().map(|j| j.id).collect();
            self.conn.query_one(&self.delete_many, &[&ids])?;
        }
        Ok(())
    }

    fn fail(&mut self, job: &Claimed, retry_in: Duration) -> Result<()> {
        // A message comes back when its visibility timeout runs out: pgmq's retry.
        let secs = retry_in.as_secs_f64().ceil() as i32;
        self.conn.query_one(&self.set_vt, &[&job.id, &secs])?;
        Ok(())
    }

    fn wait_claim(&mut self, n: i32) -> Result<Vec<Claimed>> {
        Ok(ids_only(self.conn.query(&self.read_with_poll, &[&n])?))
    }

    fn cancel_token(&self) -> CancelToken {
        self.conn.cancel_token()
    }

    fn session(&mut self) -> &mut Client {
        &mut self.conn
    }
}

impl Comparator for Pgmq {
    fn name(&self) -> &str {
        "pgmq"
    }

    fn waiting_mode(&self) -> String {
        "pgmq.read_with_poll(queue, 30, 1) with its defaults: up to 5 s, re-reading every 100 ms inside the server".into()
    }

    fn poll_interval(&self) -> Option<std::time::Duration> {
        // read_with_poll's default poll_interval_ms.
        Some(std::time::Duration::from_millis(100))
    }

    fn table(&self) -> &'static str {
        "pgmq.q_bench"
    }

    fn reset(&self, admin: &mut Client) -> Result<()> {
        admin.batch_execute(&format!(
            "SELECT pgmq.drop_queue(queue_name) FROM pgmq.meta WHERE queue_name = '{QUEUE}';
             SELECT pgmq.create('{QUEUE}');"
        ))?;
        Ok(())
    }

    fn load_queued(&self, admin: &mut Client, n: u64) -> Result<()> {
        let load = admin.prepare(&format!(
            "SELECT count(*) FROM pgmq.send_batch('{QUEUE}',
                 ARRAY(SELECT jsonb_build_object('n', g) FROM generate_series($1::bigint, $2::bigint) g))"
        ))?;
        load_in_chunks(n, |first, last| {
            admin.query_one(&load, &[&first, &last])?;
            Ok(())
        })
    }

    fn load_finished(&self, _admin: &mut Client, _n: u64) -> Result<bool> {
        // pgmq.delete removes a message: no finished messages stay in the queue's table.
        Ok(false)
    }

    fn pending(&self, admin: &mut Client) -> Result<i64> {
        Ok(admin
            .query_one(&format!("SELECT count(*) FROM pgmq.q_{QUEUE}"), &[])?
            .get(0))
    }

    fn set_retention(&self, _admin: &mut Client, _keep: Duration) -> Result<Option<String>> {
        // pgmq.delete removes a message as it is done: nothing finished stays.
        Ok(None)
    }

    fn producer(&self, conn: Client) -> Result<Box<dyn Producer>> {
        StatementProducer::prepare(
            conn,
            &format!("SELECT * FROM pgmq.send('{QUEUE}', $1::jsonb)"),
            &format!("SELECT count(*) FROM pgmq.send_batch('{QUEUE}', $1::jsonb[])"),
        )
    }

    fn worker(&self, mut conn: Client) -> Result<Box<dyn Worker>> {
        let read = conn.prepare(&format!(
            "SELECT msg_id FROM pgmq.read('{QUEUE}', {VT}, $1::int)"
        ))?;
        let read_with_poll = conn.prepare(&format!(
            "SELECT msg_id FROM pgmq.read_with_poll('{QUEUE}', {VT}, $1::int)"
        ))?;
        let delete_one = conn.prepare(&format!("SELECT pgmq.delete('{QUEUE}', $1::bigint)"))?;
        let delete_many = conn.prepare(&format!(
            "SELECT count(*) FROM pgmq.delete('{QUEUE}', $1::bigint[])"
        ))?;
        let set_vt = conn.prepare(&format!(
            "SELECT msg_id FROM pgmq.set_vt('{QUEUE}', $1::bigint, $2::int)"
        ))?;
        Ok(Box::new(PgmqWorker {
            conn,
            read,
            read_with_poll,
            delete_one,
            delete_many,
            set_vt,
        }))
    }
}
