package fence_test

import (
	"context"
	"database/sql"
	"errors"
	"log"
	"os"

	_ "github.com/jackc/pgx/v5/stdlib" // registers the database/sql driver "pgx"

	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/fence"
)

// A holder's guarded write to PostgreSQL: the fence's Check and the write in
// one transaction, retried on a serialization failure. The example has no
// Output comment: it needs a PostgreSQL server (DATABASE_URL), so go test
// compiles it without running it. TestPausedHolderWriteRefusedByPostgres
// runs the same steps against a real server, with a holder process paused
// past its lease.
func ExampleSQL() {
	ctx := context.Background()
	db, err := sql.Open("pgx", os.Getenv("DATABASE_URL")) // postgres://user@host:5432/db
	if err != nil {
		log.Fatal(err)
	}
	defer db.Close()
	f, err := fence.NewSQL(fence.DefaultSQLTable)
	if err != nil {
		log.Fatal(err)
	}
	if err := f.CreateTable(ctx, db); err != nil { // or in your migrations: docs/fencing.md
		log.Fatal(err)
	}

	var lease *kvlease.Lease // from kvlease.Acquire, checked with lease.Check()
	setBalance := func(balance int) error {
		for {
			err := func() error {
				tx, err := db.BeginTx(ctx, &sql.TxOptions{Isolation: sql.LevelSerializable})
				if err != nil {
					return err
				}
				defer tx.Rollback()
				if err := f.Check(ctx, tx, "account-42", lease.Token()); err != nil {
					return err
				}
				if _, err := tx.ExecContext(ctx, "UPDATE account SET balance = $1 WHERE id = 42", balance); err != nil {
					return err
				}
				return tx.Commit()
			}()
			if !fence.Retryable(err) { // else a serialization failure: run the transaction again
				return err
			}
		}
	}
	err = setBalance(250)
	var stale *fence.StaleTokenError
	if errors.As(err, &stale) {
		// A newer holder has written: this one's tenure is over.
		log.Printf("refused: token %d, %d already accepted", stale.Token, stale.Highest)
	}
}
