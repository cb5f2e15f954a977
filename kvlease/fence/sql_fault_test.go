package fence_test

import (
	"context"
	"database/sql"
	"errors"
	"fmt"
	"io"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/fence"
	"github.com/leased/leased/kvlease/fence/pgtest"
	"github.com/leased/leased/kvlease/kvleasetest"
)

// envPGDSN passes the database to the child process.
const envPGDSN = "FENCE_TEST_PG_DSN"

// pgPausedWriter is a holder whose resource is a PostgreSQL table: it takes
// the lease, checks it, reports "checked <token>", and waits for a line on
// stdin before its fenced transaction. The parent stops it (SIGSTOP)
// between the check and the write.
func pgPausedWriter(url string) error {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, st, err := kvleasetest.ChildStore(ctx, url, kvlease.WithGrantorMargin(0))
	if err != nil {
		return err
	}
	db, err := sql.Open("pgx", os.Getenv(envPGDSN))
	if err != nil {
		return err
	}
	defer db.Close()
	if err := db.PingContext(ctx); err != nil {
		return err
	}
	f, err := fence.NewSQL(fence.DefaultSQLTable)
	if err != nil {
		return err
	}
	l, stop, err := checkedThenResumed(ctx, st, "pg-writer")
	if err != nil {
		return err
	}
	defer stop()
	// Resumed: the lease check above passed, so the write goes out. Only
	// the database can stop it.
	err = fencedWrite(ctx, db, f, nil, "account-42", l.Token(), "from the paused holder")
	var stale *fence.StaleTokenError
	if errors.As(err, &stale) {
		fmt.Printf("rejected %d %d %d\n", stale.Token, stale.Highest, f.Rejected())
		return nil
	}
	fmt.Printf("accepted %v\n", err)
	return nil
}

// The seed's third verification, against PostgreSQL: a holder process
// paused with SIGSTOP past its lease, a replacement granted with a higher
// token that writes through the SQL fence, then the resumed holder's write
// refused by the database, and the table holding the replacement's value.
func TestPausedHolderWriteRefusedByPostgres(t *testing.T) {
	srv := kvleasetest.NewServer(t)
	st := kvleasetest.OpenStore(t, srv.ClientURL(), kvlease.WithGrantorMargin(0))
	w := kvleasetest.Watch(t, st, "")
	dsn := pgtest.Database(t)
	db := openDB(t, dsn)
	f := createFence(t, db)

	cmd, stdin, line := kvleasetest.StartChild(t, "pg-paused-writer", srv.ClientURL(), envPGDSN+"="+dsn)
	childToken, next := pauseChildPastLease(t, cmd, line, w, st, "pg-writer")
	if err := fencedWrite(t.Context(), db, f, nil, "account-42", next.Token(), "from the replacement"); err != nil {
		t.Fatal(err)
	}

	if err := cmd.Process.Signal(syscall.SIGCONT); err != nil {
		t.Fatal(err)
	}
	if _, err := io.WriteString(stdin, "write\n"); err != nil {
		t.Fatal(err)
	}
	got := line()
	if want := fmt.Sprintf("rejected %d %d 1", childToken, next.Token()); got != want {
		t.Fatalf("child's write: %q, want %q", got, want)
	}
	if err := cmd.Wait(); err != nil {
		t.Fatalf("child: %v", err)
	}
	// What the database holds: the replacement's write, and its token.
	if v, tok := account(t, db, "account-42"); v != "from the replacement" || tok != next.Token() {
		t.Fatalf("account-42 = %q (token %d), want the replacement's write (token %d)", v, tok, next.Token())
	}
	if h := highest(t, db, f, "account-42"); h != next.Token() {
		t.Fatalf("fence at %d, want %d", h, next.Token())
	}
	if f.Rejected() != 0 {
		t.Fatal("the parent's fence counted a rejection it did not make")
	}
}
