// Command pg-work-queue shows a work queue whose items complete into a
// PostgreSQL table, fenced by the claim's token, so that each item is
// completed exactly once even when a paused worker wakes up late.
//
// It puts 1,000 items on the queue "renders" and starts four worker
// processes (this binary again, with -worker). A worker claims an item with
// [workqueue.Queue.Claim] and raises the item's fence in PostgreSQL to the
// claim's token at once ([fence.SQL.Check] in a transaction of its own), so
// that from then on any older claim is refused by the database. It then
// renders the item and completes it in one transaction: fence.SQL.Check
// with the claim's token, then INSERT into the table of completed items
// (the item is its primary key), then commit; last, it completes the claim
// at the queue.
//
// Worker w4 checks its claim on its third item, reports it, and is stopped
// there by this program (SIGSTOP), as a process is by a long GC pause or a
// VM migration. Its claim lapses after its duration; another worker claims
// the item, which raises the fence, and completes it. Then w4 is resumed
// (SIGCONT) and goes ahead with the completion its check allowed: the
// database refuses it. At the end every item is in the table exactly once,
// the paused worker's item completed by another worker with a higher
// token.
//
// Usage:
//
//	go run ./examples/pg-work-queue [-nats-url nats://host:4222] [-pg-dsn postgres://user@host:5432/db]
//
// Without -nats-url it starts an embedded JetStream server in a temporary
// directory, removed on exit. Without -pg-dsn it starts a throwaway
// PostgreSQL server from the installed binaries (initdb, pg_ctl: Debian's
// postgresql package) with [pgtest.StartServer], removed on exit. It uses
// the lease bucket "pg-work-queue", the queue's buckets "renders-items" and
// "renders-done", and the tables pg_work_queue_done and pg_work_queue_fence,
// and drops the queue's buckets and the tables first, so that a second run
// starts from an empty queue.
//
// Claims last 1 s and the store adds no grantor margin, so that the paused
// worker's claim lapses in about a second. In production keep the default
// grantor margin: it absorbs forward steps of the server's clock.
package main

import (
	"bufio"
	"context"
	"database/sql"
	"errors"
	"flag"
	"fmt"
	"io"
	"log"
	"os"
	"os/exec"
	"os/signal"
	"slices"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	_ "github.com/jackc/pgx/v5/stdlib" // the database/sql driver "pgx"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/leased/leased/examples/internal/demo"
	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/fence"
	"github.com/leased/leased/kvlease/fence/pgtest"
	"github.com/leased/leased/kvlease/workqueue"
)

const (
	leaseBucket = "pg-work-queue"
	queueName   = "renders"
	doneTable   = "pg_work_queue_done"
	fenceTable  = "pg_work_queue_fence"
	numItems    = 1000
	claimD      = time.Second
	sleeper     = "w4" // the worker that is paused …
	pauseAfter  = 2    // … on the claim after its second completed item
)

var workers = []string{"w1", "w2", "w3", sleeper}

// itemID names the i-th item (from 1).
func itemID(i int) string { return fmt.Sprintf("frame-%04d", i) }

func result(item string) string { return "renders/" + item + ".png" }

func main() {
	natsURL := flag.String("nats-url", "", "NATS server URL (default: an embedded server)")
	dsn := flag.String("pg-dsn", "", "PostgreSQL URL (default: a throwaway server from the installed PostgreSQL binaries)")
	worker := flag.String("worker", "", "run as this worker process (the program starts them itself)")
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if *worker != "" {
		// The URLs come in the environment: they may hold passwords,
		// which a command line shows to every user of the machine.
		if err := runWorker(ctx, os.Stdin, os.Stdout, *worker, os.Getenv(envNATSURL), os.Getenv(envDSN)); err != nil {
			fmt.Println("error", err)
			os.Exit(1)
		}
		return
	}
	err := demo.WithServer(*natsURL, func(natsURL string) error {
		return withPostgres(*dsn, func(dsn string) error { return run(ctx, os.Stdout, natsURL, dsn) })
	})
	if err != nil {
		log.Fatal(err)
	}
}

// withPostgres calls fn with dsn or, if that is empty, with the URL of a
// throwaway PostgreSQL server.
func withPostgres(dsn string, fn func(dsn string) error) error {
	if dsn != "" {
		return fn(dsn)
	}
	srv, err := pgtest.StartServer()
	if err != nil {
		return fmt.Errorf("no -pg-dsn, and no throwaway server: %w", err)
	}
	defer srv.Close()
	return fn(srv.DSN())
}

// connect opens who's NATS connection, lease store and queue.
func connect(ctx context.Context, who, natsURL string) (*nats.Conn, jetstream.JetStream, *kvlease.Store, error) {
	nc, err := nats.Connect(natsURL, append(kvlease.ConnOptions(), nats.Name(who))...)
	if err != nil {
		return nil, nil, nil, err
	}
	js, _ := jetstream.New(nc) // fails only on a bad option
	st, err := kvlease.Open(ctx, js, kvlease.WithBucket(leaseBucket), kvlease.WithGrantorMargin(0))
	if err != nil {
		nc.Close()
		return nil, nil, nil, fmt.Errorf("%s: %w", who, err)
	}
	return nc, js, st, nil
}

// openDB opens the database and the items' fence.
func openDB(ctx context.Context, dsn string) (*sql.DB, *fence.SQL, error) {
	db, err := sql.Open("pgx", dsn)
	if err != nil {
		return nil, nil, err
	}
	if err := db.PingContext(ctx); err != nil {
		db.Close()
		return nil, nil, err
	}
	f, err := fence.NewSQL(fenceTable)
	if err != nil {
		db.Close()
		return nil, nil, err
	}
	return db, f, nil
}

// A worker process talks to run in lines. It prints
//
//	ready
//	claimed <item> <token>            after the claim-time raise of the fence
//	checked <item> <token>            (w4, once) its claim checked; it waits for "resume"
//	completed <item> <token>          the item's row inserted and committed
//	refused <item> <token> <highest> claim|completion
//	                                  the database refused the claim's token
//	already <item> <token>            the item's row was there (completed by an earlier claim)
//	dequeued <item> <token>           the claim completed at the queue: the item is off it
//	error <err>                       and exits 1
//
// and reads "resume" lines; it exits when its stdin closes.

// runWorker is one worker process: claim, raise the fence, render,
// complete in PostgreSQL, complete at the queue; until stdin closes.
func runWorker(ctx context.Context, in io.Reader, out io.Writer, name, natsURL, dsn string) error {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	resume := make(chan struct{}, 1)
	go func() {
		defer cancel() // stdin closed: stop
		sc := bufio.NewScanner(in)
		for sc.Scan() {
			if sc.Text() == "resume" {
				resume <- struct{}{}
			}
		}
	}()
	err := work(ctx, resume, out, name, natsURL, dsn)
	if ctx.Err() != nil {
		return nil // told to stop: run closes stdin once every item is completed
	}
	return err
}

func work(ctx context.Context, resume <-chan struct{}, out io.Writer, name, natsURL, dsn string) error {
	say := func(format string, args ...any) { fmt.Fprintf(out, format+"\n", args...) }

	nc, js, st, err := connect(ctx, name, natsURL)
	if err != nil {
		return err
	}
	defer nc.Close()
	q, err := workqueue.Open(ctx, js, st, queueName)
	if err != nil {
		return err
	}
	defer q.Close()
	db, f, err := openDB(ctx, dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	say("ready")

	completed, paused := 0, false
	for {
		cl, err := q.Claim(ctx, name, claimD)
		if err != nil {
			return fmt.Errorf("claim: %w", err)
		}
		token := cl.Token()
		// Raise the item's fence to this claim now: from here on the
		// database refuses every older claim of the item.
		err = inTx(ctx, db, func(tx *sql.Tx) error { return f.Check(ctx, tx, cl.Item, token) })
		if refused(err, say, cl.Item, token, "claim") {
			cl.Orphan()
			continue
		} else if err != nil {
			return fmt.Errorf("raise the fence of %s: %w", cl.Item, err)
		}
		say("claimed %s %d", cl.Item, token)

		if name == sleeper && completed == pauseAfter && !paused {
			paused = true
			if err := cl.Lease().Check(); err != nil {
				return err
			}
			say("checked %s %d", cl.Item, token)
			select { // run stops this process here, and resumes it
			case <-resume:
			case <-ctx.Done():
				return nil
			}
			// The check above passed: the worker goes ahead, late.
		}

		res := result(cl.Item) // the work
		inserted := false
		err = inTx(ctx, db, func(tx *sql.Tx) error {
			if err := f.Check(ctx, tx, cl.Item, token); err != nil {
				return err
			}
			r, err := tx.ExecContext(ctx, "INSERT INTO "+doneTable+" (item, worker, token, result) VALUES ($1, $2, $3, $4) ON CONFLICT (item) DO NOTHING",
				cl.Item, name, int64(token), res)
			if err != nil {
				return err
			}
			n, err := r.RowsAffected()
			inserted = n == 1
			return err
		})
		switch {
		case refused(err, say, cl.Item, token, "completion"):
			cl.Orphan()
			continue
		case err != nil:
			return fmt.Errorf("complete %s: %w", cl.Item, err)
		case inserted:
			completed++
			say("completed %s %d", cl.Item, token)
		default:
			say("already %s %d", cl.Item, token)
		}
		// Done in PostgreSQL; now take the item off the queue. If this is
		// refused (the claim lapsed meanwhile), the next claim of the item
		// finds its row and only takes it off the queue.
		// Complete may be called again after an error: an unanswered one
		// (a cluster electing a leader) is tried again while ctx allows.
		_, err = kvlease.RetryUnavailable(ctx, time.Second, nil, func() (struct{}, error) {
			return struct{}{}, cl.Complete(ctx, []byte(res))
		})
		switch {
		case err == nil:
			say("dequeued %s %d", cl.Item, token)
		case !errors.Is(err, kvlease.ErrExpired) && !errors.Is(err, fence.ErrStaleToken) && !errors.Is(err, workqueue.ErrDone):
			return fmt.Errorf("complete %s at the queue: %w", cl.Item, err)
		}
	}
}

// refused reports err, if it is the fence's refusal, as "refused".
func refused(err error, say func(string, ...any), item string, token kvlease.Token, at string) bool {
	var stale *fence.StaleTokenError
	if errors.As(err, &stale) {
		say("refused %s %d %d %s", item, token, stale.Highest, at)
		return true
	}
	return false
}

// inTx runs fn in a transaction (READ COMMITTED, PostgreSQL's default) and
// commits if fn returns nil.
func inTx(ctx context.Context, db *sql.DB, fn func(*sql.Tx) error) error {
	tx, err := db.BeginTx(ctx, nil)
	if err != nil {
		return err
	}
	defer tx.Rollback()
	if err := fn(tx); err != nil {
		return err
	}
	return tx.Commit()
}

// proc is a worker process as run sees it.
type proc struct {
	name  string
	cmd   *exec.Cmd
	stdin io.WriteCloser
}

type line struct {
	worker string
	text   string // "" when the worker's output ended
}

// startWorkers starts the worker processes: this executable again, with
// -worker, the URLs in their environment (envWorkerProcess tells a test
// binary to run main).
// Their output goes to lines, until stop is closed; readers counts the
// goroutines reading it.
func startWorkers(natsURL, dsn string, lines chan<- line, stop <-chan struct{}, readers *sync.WaitGroup) ([]*proc, error) {
	exe, err := os.Executable()
	if err != nil {
		return nil, err
	}
	var procs []*proc
	for _, name := range workers {
		cmd := exec.Command(exe, "-worker", name)
		cmd.Env = append(os.Environ(), envWorkerProcess+"=1", envNATSURL+"="+natsURL, envDSN+"="+dsn)
		cmd.Stderr = os.Stderr
		stdin, err := cmd.StdinPipe()
		if err != nil {
			return procs, err
		}
		stdout, err := cmd.StdoutPipe()
		if err != nil {
			return procs, err
		}
		if err := cmd.Start(); err != nil {
			return procs, err
		}
		procs = append(procs, &proc{name: name, cmd: cmd, stdin: stdin})
		readers.Go(func() {
			send := func(l line) bool {
				select {
				case lines <- l:
					return true
				case <-stop:
					return false
				}
			}
			sc := bufio.NewScanner(stdout)
			for sc.Scan() {
				if !send(line{name, sc.Text()}) {
					return
				}
			}
			send(line{name, ""})
		})
	}
	return procs, nil
}

// A worker's environment: envWorkerProcess makes a test binary run main
// (see main_test.go's TestMain); envNATSURL and envDSN are the URLs.
const (
	envWorkerProcess = "PG_WORK_QUEUE_WORKER"
	envNATSURL       = "PG_WORK_QUEUE_NATS_URL"
	envDSN           = "PG_WORK_QUEUE_PG_DSN"
)

// pause is the sleeper's stopped claim.
type pause struct {
	item      string
	token     kvlease.Token
	at        time.Time
	successor string        // who claimed the item next
	next      kvlease.Token // with which token
	refused   kvlease.Token // the highest token the database named when refusing the sleeper (0: not yet)
}

// run tells the story against the NATS server at natsURL and the database
// at dsn, writing it to w. It returns an error unless every item ends up
// completed exactly once in PostgreSQL, the paused worker's late
// completion refused.
func run(ctx context.Context, w io.Writer, natsURL, dsn string) error {
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()

	nc, js, st, err := connect(ctx, "main", natsURL)
	if err != nil {
		return err
	}
	defer nc.Close()
	// The database first: a run that cannot reach it deletes nothing.
	db, f, err := openDB(ctx, dsn)
	if err != nil {
		return err
	}
	defer db.Close()
	// Start from an empty queue and empty tables: remove what an earlier
	// run left.
	for _, b := range []string{queueName + "-items", queueName + "-done"} {
		switch err := js.DeleteKeyValue(ctx, b); {
		case err == nil:
			fmt.Fprintf(w, "deleted the bucket %q of an earlier run\n", b)
		case !errors.Is(err, jetstream.ErrBucketNotFound):
			return fmt.Errorf("delete %s: %w", b, err)
		}
	}
	for _, stmt := range []string{
		"DROP TABLE IF EXISTS " + doneTable + ", " + fenceTable,
		"CREATE TABLE " + doneTable + " (item text PRIMARY KEY, worker text NOT NULL, token bigint NOT NULL, result text NOT NULL)",
	} {
		if _, err := db.ExecContext(ctx, stmt); err != nil {
			return fmt.Errorf("%s: %w", stmt, err)
		}
	}
	if err := f.CreateTable(ctx, db); err != nil {
		return err
	}
	q, err := workqueue.Open(ctx, js, st, queueName)
	if err != nil {
		return err
	}
	defer q.Close()
	if err := addItems(ctx, q); err != nil {
		return err
	}
	fmt.Fprintf(w, "added %d items to the queue %q; worker processes %s start (claims last %v)\n",
		numItems, queueName, strings.Join(workers, ", "), claimD)

	lines := make(chan line, 64)
	stop := make(chan struct{})
	var readers sync.WaitGroup
	procs, err := startWorkers(natsURL, dsn, lines, stop, &readers)
	defer func() {
		close(stop)
		for _, pr := range procs { // a stopped process dies of SIGKILL too
			_ = pr.cmd.Process.Kill()
		}
		readers.Wait()
		for _, pr := range procs {
			_ = pr.cmd.Wait()
		}
	}()
	if err != nil {
		return err
	}
	byName := map[string]*proc{}
	for _, pr := range procs {
		byName[pr.name] = pr
	}
	started := time.Now()

	completedBy := map[string]string{} // item → the worker whose row it is
	dequeued := map[string]bool{}      // items off the queue
	tokenOf := map[string]kvlease.Token{}
	counts := map[string]int{}
	var p *pause
	for len(completedBy) < numItems || len(dequeued) < numItems || p == nil || p.refused == 0 {
		var l line
		select {
		case l = <-lines:
		case <-ctx.Done():
			return fmt.Errorf("%d of %d items completed, %d off the queue, the pause %+v: %w",
				len(completedBy), numItems, len(dequeued), p, ctx.Err())
		}
		fs := strings.Fields(l.text)
		if len(fs) == 0 {
			return fmt.Errorf("%s exited early", l.worker)
		}
		var item string
		var token, highest kvlease.Token
		if len(fs) >= 3 {
			item = fs[1]
			tok, _ := strconv.ParseUint(fs[2], 10, 64)
			token = kvlease.Token(tok)
		}
		switch fs[0] {
		case "ready":
		case "already":
			if p != nil && l.worker == sleeper && item == p.item && token == p.token {
				return fmt.Errorf("%s's late completion of %s got past the fence (the row was there)", sleeper, item)
			}
		case "dequeued":
			dequeued[item] = true
		case "error":
			return fmt.Errorf("%s: %s", l.worker, l.text)
		case "checked": // the sleeper, holding a checked claim: stop it here
			if err := byName[l.worker].cmd.Process.Signal(syscall.SIGSTOP); err != nil {
				return err
			}
			p = &pause{item: item, token: token, at: time.Now()}
			fmt.Fprintf(w, "%s: checked its claim on %s (token %d), then stopped (SIGSTOP) before completing it\n",
				l.worker, item, token)
		case "claimed":
			if p != nil && p.successor == "" && item == p.item {
				p.successor, p.next = l.worker, token
				fmt.Fprintf(w, "%s: claimed %s (token %d) %v after %s was stopped, and raised its fence\n",
					l.worker, item, token, time.Since(p.at).Round(time.Millisecond), sleeper)
				sp := byName[sleeper]
				if err := sp.cmd.Process.Signal(syscall.SIGCONT); err != nil {
					return err
				}
				if _, err := io.WriteString(sp.stdin, "resume\n"); err != nil {
					return err
				}
				fmt.Fprintf(w, "%s: resumed (SIGCONT); it goes ahead with the completion its check allowed\n", sleeper)
			}
		case "completed":
			if p != nil && l.worker == sleeper && item == p.item && token == p.token {
				return fmt.Errorf("%s's late completion of %s was accepted", sleeper, item)
			}
			if prev, dup := completedBy[item]; dup {
				return fmt.Errorf("%s completed twice, by %s and %s", item, prev, l.worker)
			}
			completedBy[item], tokenOf[item] = l.worker, token
			counts[l.worker]++
		case "refused":
			at := ""
			if len(fs) == 5 {
				h, _ := strconv.ParseUint(fs[3], 10, 64)
				highest, at = kvlease.Token(h), fs[4]
			}
			if p != nil && l.worker == sleeper && item == p.item && token == p.token && at == "completion" {
				p.refused = highest
			}
			fmt.Fprintf(w, "%s: %s of %s (token %d) refused by PostgreSQL: token %d already accepted\n",
				l.worker, at, item, token, highest)
		default:
			return fmt.Errorf("%s said %q", l.worker, l.text)
		}
	}
	for _, pr := range procs {
		_ = pr.stdin.Close() // the workers stop
	}
	for ended := 0; ended < len(procs); { // read what they still say, to its end
		select {
		case l := <-lines:
			if l.text == "" {
				ended++
			}
		case <-ctx.Done():
			return fmt.Errorf("workers not stopping: %w", ctx.Err())
		}
	}
	var exitErr error
	for _, pr := range procs {
		if err := pr.cmd.Wait(); err != nil && exitErr == nil {
			exitErr = fmt.Errorf("%s: %w", pr.name, err)
		}
	}
	procs = nil // waited for: nothing for the deferred kill
	if exitErr != nil {
		return exitErr
	}
	fmt.Fprintf(w, "all workers stopped after %v\n", time.Since(started).Round(time.Millisecond))
	if err := check(ctx, w, db, f, completedBy, tokenOf, p); err != nil {
		return err
	}
	var per []string
	for _, name := range workers {
		per = append(per, fmt.Sprintf("%s %d", name, counts[name]))
	}
	fmt.Fprintf(w, "items completed per worker: %s\n", strings.Join(per, ", "))
	fmt.Fprintf(w, "all %d items completed exactly once in PostgreSQL\n", numItems)
	return nil
}

// addItems puts the items on the queue, a few at a time.
func addItems(ctx context.Context, q *workqueue.Queue) error {
	ids := make(chan string)
	errs := make(chan error, 8)
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for id := range ids {
				if err := q.Add(ctx, id, []byte("scenes/"+id)); err != nil {
					errs <- fmt.Errorf("add %s: %w", id, err)
					return
				}
			}
		})
	}
	var err error
feed:
	for i := 1; i <= numItems; i++ {
		select {
		case ids <- itemID(i):
		case err = <-errs:
			break feed
		}
	}
	close(ids)
	wg.Wait()
	if err == nil && len(errs) > 0 {
		err = <-errs
	}
	return err
}

// check reads the table of completed items back: every item exactly once,
// by the worker that reported it, the paused item by its successor with a
// higher token, and its fence there.
func check(ctx context.Context, w io.Writer, db *sql.DB, f *fence.SQL, completedBy map[string]string,
	tokenOf map[string]kvlease.Token, p *pause) error {
	rows, err := db.QueryContext(ctx, "SELECT item, worker, token, result FROM "+doneTable+" ORDER BY item")
	if err != nil {
		return err
	}
	defer rows.Close()
	var items []string
	for rows.Next() {
		var item, worker, res string
		var token int64
		if err := rows.Scan(&item, &worker, &token, &res); err != nil {
			return err
		}
		items = append(items, item)
		switch {
		case worker != completedBy[item] || kvlease.Token(token) != tokenOf[item]:
			return fmt.Errorf("%s: row by %s (token %d), but %s reported it (token %d)", item, worker, token, completedBy[item], tokenOf[item])
		case res != result(item):
			return fmt.Errorf("%s: result %q", item, res)
		}
	}
	if err := rows.Err(); err != nil {
		return err
	}
	want := make([]string, numItems)
	for i := range want {
		want[i] = itemID(i + 1)
	}
	if !slices.Equal(items, want) {
		return fmt.Errorf("the table holds %d rows, not each of the %d items once", len(items), numItems)
	}
	worker, token := completedBy[p.item], tokenOf[p.item]
	if worker == sleeper || token <= p.token {
		return fmt.Errorf("%s, claimed by %s with token %d, completed by %s with token %d", p.item, sleeper, p.token, worker, token)
	}
	h, err := f.Highest(ctx, db, p.item)
	if err != nil {
		return err
	}
	if h < token || p.refused < p.next {
		return fmt.Errorf("%s: fence at %d, the refusal named %d; want at least %d", p.item, h, p.refused, p.next)
	}
	fmt.Fprintf(w, "%s, claimed by %s (token %d) before its pause, was completed by %s (token %d)\n",
		p.item, sleeper, p.token, worker, token)
	return nil
}
