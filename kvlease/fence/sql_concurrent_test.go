package fence_test

import (
	"database/sql"
	"errors"
	"fmt"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/fence"
)

// attempt is one writer's fenced transaction, as the writer saw it.
type attempt struct {
	writer, n int
	resource  string
	token     kvlease.Token
	outcome   string        // "committed", "stale", "rolled back"
	highest   kvlease.Token // the refusal's Highest, when stale
	start     time.Time     // before BeginTx of the attempt that decided
	end       time.Time     // after Commit returned, when committed
	retries   int           // serialization failures retried
}

// Many writers, each with transactions of its own on connections of its
// own, write three resources with interleaved tokens (mostly rising, some
// behind, some far ahead and then rolled back), in READ COMMITTED and in
// SERIALIZABLE (retrying serialization failures with the same token). Every
// committed transaction also appends to a history table. Then:
//
//   - in the database's own commit order (the history's sequence: the
//     fence's row lock orders a resource's transactions from their Check
//     on), a resource's tokens never go down;
//   - in real time, no token committed in a transaction that began after a
//     higher token's transaction had committed;
//   - a rolled-back transaction raised nothing: every refusal names a
//     committed token as the highest, and the fence ends at the highest
//     committed token, below the rolled-back ones;
//   - the guarded table holds each resource's highest committed token.
func TestSQLConcurrentWriters(t *testing.T) {
	for _, level := range []sql.IsolationLevel{sql.LevelReadCommitted, sql.LevelSerializable} {
		t.Run(level.String(), func(t *testing.T) { concurrentWriters(t, level) })
	}
}

func concurrentWriters(t *testing.T, level sql.IsolationLevel) {
	const (
		writers   = 8
		perWriter = 40
		ahead     = 1_000_000 // rolled-back transactions' tokens run this far ahead
	)
	resources := []string{"r0", "r1", "r2"}
	db, f := sqlFence(t)
	db.SetMaxOpenConns(writers + 2)
	mustExec(t, db, "CREATE TABLE history (seq bigserial PRIMARY KEY, resource text NOT NULL, token bigint NOT NULL, writer int NOT NULL, n int NOT NULL)")
	ctx := t.Context()
	opts := &sql.TxOptions{Isolation: level}

	var (
		clock    atomic.Int64 // tokens are drawn around it
		mu       sync.Mutex
		attempts []attempt
		wg       sync.WaitGroup
	)
	// one runs attempt a until it is decided, retrying serialization
	// failures; it returns an error only for anything else.
	one := func(a *attempt, rollback bool) error {
		for {
			a.start = time.Now()
			err := func() error {
				tx, err := db.BeginTx(ctx, opts)
				if err != nil {
					return err
				}
				defer tx.Rollback()
				if err := f.Check(ctx, tx, a.resource, a.token); err != nil {
					return err
				}
				if _, err := tx.ExecContext(ctx, "INSERT INTO history (resource, token, writer, n) VALUES ($1, $2, $3, $4)",
					a.resource, int64(a.token), a.writer, a.n); err != nil {
					return err
				}
				if _, err := tx.ExecContext(ctx, `INSERT INTO account (id, value, token) VALUES ($1, $2, $3)
					ON CONFLICT (id) DO UPDATE SET value = EXCLUDED.value, token = EXCLUDED.token`,
					a.resource, fmt.Sprintf("w%d/%d", a.writer, a.n), int64(a.token)); err != nil {
					return err
				}
				if rollback {
					return tx.Rollback()
				}
				if err := tx.Commit(); err != nil {
					return err
				}
				a.end = time.Now()
				return nil
			}()
			var stale *fence.StaleTokenError
			switch {
			case err == nil && rollback:
				a.outcome = "rolled back"
				return nil
			case err == nil:
				a.outcome = "committed"
				return nil
			case errors.As(err, &stale):
				a.outcome, a.highest = "stale", stale.Highest
				return nil
			case fence.Retryable(err):
				a.retries++
				continue
			}
			return err
		}
	}
	for w := range writers {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), uint64(level)))
			for n := range perWriter {
				rollback := r.IntN(6) == 0
				tok := clock.Add(1) - int64(r.IntN(8))
				if rollback {
					tok += ahead
				}
				a := attempt{writer: w, n: n, resource: resources[r.IntN(len(resources))], token: kvlease.Token(max(tok, 1))}
				if err := one(&a, rollback); err != nil {
					t.Errorf("writer %d, attempt %d (token %d): %v", w, n, a.token, err)
					return
				}
				mu.Lock()
				attempts = append(attempts, a)
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	if t.Failed() {
		return
	}

	outcomes := map[string]int{}
	retries := 0
	committed := map[string][]attempt{} // resource → committed attempts
	committedTokens := map[string]map[kvlease.Token]bool{}
	for _, a := range attempts {
		outcomes[a.outcome]++
		retries += a.retries
		if a.outcome == "committed" {
			committed[a.resource] = append(committed[a.resource], a)
			if committedTokens[a.resource] == nil {
				committedTokens[a.resource] = map[kvlease.Token]bool{}
			}
			committedTokens[a.resource][a.token] = true
		}
	}
	t.Logf("%s: %v, %d serialization failures retried", level, outcomes, retries)
	if outcomes["committed"] == 0 || outcomes["stale"] == 0 || outcomes["rolled back"] == 0 {
		t.Fatalf("outcomes %v: the run did not exercise every case", outcomes)
	}
	if n := f.Rejected(); n != int64(outcomes["stale"]) {
		t.Errorf("Rejected() = %d, want %d", n, outcomes["stale"])
	}

	// The database's commit order: the history, by sequence.
	rows, err := db.QueryContext(ctx, "SELECT resource, token, writer, n FROM history ORDER BY seq")
	if err != nil {
		t.Fatal(err)
	}
	defer rows.Close()
	last := map[string]kvlease.Token{}
	inHistory := 0
	for rows.Next() {
		var res string
		var tok int64
		var w, n int
		if err := rows.Scan(&res, &tok, &w, &n); err != nil {
			t.Fatal(err)
		}
		inHistory++
		if kvlease.Token(tok) < last[res] {
			t.Errorf("%s: token %d (writer %d, attempt %d) committed after token %d", res, tok, w, n, last[res])
		}
		if tok >= ahead && !committedTokens[res][kvlease.Token(tok)] {
			t.Errorf("%s: history holds token %d, which was rolled back", res, tok)
		}
		last[res] = kvlease.Token(tok)
	}
	if err := rows.Err(); err != nil {
		t.Fatal(err)
	}
	if inHistory != outcomes["committed"] {
		t.Errorf("history holds %d commits, the writers saw %d", inHistory, outcomes["committed"])
	}

	// Real time: a transaction that began after a higher token committed
	// never commits.
	for res, cs := range committed {
		byEnd := slices.SortedFunc(slices.Values(cs), func(a, b attempt) int { return a.end.Compare(b.end) })
		for _, lo := range cs {
			for _, hi := range byEnd {
				if !hi.end.Before(lo.start) {
					break
				}
				if hi.token > lo.token {
					t.Errorf("%s: token %d committed in a transaction begun %v after token %d had committed",
						res, lo.token, lo.start.Sub(hi.end), hi.token)
				}
			}
		}
	}

	// Refusals name committed tokens; the fence and the guarded table end
	// at the highest committed token.
	for _, a := range attempts {
		if a.outcome == "stale" && (a.highest <= a.token || !committedTokens[a.resource][a.highest]) {
			t.Errorf("%s: token %d refused with highest %d, not a higher committed token", a.resource, a.token, a.highest)
		}
	}
	for _, res := range resources {
		want := last[res]
		if h := highest(t, db, f, res); h != want {
			t.Errorf("%s: fence at %d, want the highest committed token %d", res, h, want)
		}
		if _, tok := account(t, db, res); tok != want {
			t.Errorf("%s: guarded table at token %d, want %d", res, tok, want)
		}
	}
}
