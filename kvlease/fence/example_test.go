package fence_test

import (
	"context"
	"errors"
	"fmt"
	"log"
	"time"

	"github.com/leased/leased/kvlease"
	"github.com/leased/leased/kvlease/fence"
	"github.com/leased/leased/kvlease/kvleasetest"
)

func ExampleMem() {
	var f fence.Mem
	write := func(token kvlease.Token, v string) error {
		return f.Do("config", token, func() error {
			fmt.Printf("token %d wrote %q\n", token, v)
			return nil
		})
	}

	_ = write(5, "v1") // the old holder
	_ = write(7, "v2") // its successor, after the old tenure lapsed
	// The old holder resumes after a pause, still carrying token 5.
	err := write(5, "v3")
	var stale *fence.StaleTokenError
	if errors.As(err, &stale) {
		fmt.Printf("refused: resource %q, token %d, highest %d\n", stale.Resource, stale.Token, stale.Highest)
	}
	fmt.Println(errors.Is(err, fence.ErrStaleToken), f.Highest("config"), f.Rejected())
	// Output:
	// token 5 wrote "v1"
	// token 7 wrote "v2"
	// refused: resource "config", token 5, highest 7
	// true 7 1
}

func ExampleKV_Write() {
	st, js, stop, err := kvleasetest.StartStore()
	if err != nil {
		log.Fatal(err)
	}
	defer stop()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	f, err := fence.OpenKV(ctx, js, "fences")
	if err != nil {
		log.Fatal(err)
	}
	a, err := kvlease.Acquire(ctx, st, "ledger", "a", 5*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	if err := f.Write(ctx, "account-42", a.Token(), []byte("balance=100")); err != nil {
		log.Fatal(err)
	}
	// a's tenure ends (here by release; a lapse works the same) and b's
	// begins, with a higher token.
	if err := a.Release(ctx); err != nil {
		log.Fatal(err)
	}
	b, err := kvlease.Acquire(ctx, st, "ledger", "b", 5*time.Second)
	if err != nil {
		log.Fatal(err)
	}
	defer b.Release(ctx)
	if err := f.Write(ctx, "account-42", b.Token(), []byte("balance=250")); err != nil {
		log.Fatal(err)
	}

	// A late write from a, which checked its lease before a pause.
	err = f.Write(ctx, "account-42", a.Token(), []byte("balance=90"))
	fmt.Println(err)

	v, err := f.Read(ctx, "account-42")
	if err != nil {
		log.Fatal(err)
	}
	fmt.Printf("%s (token %d)\n", v.Data, v.Token)
	// Output:
	// fence: stale token 1 for "account-42": 3 already accepted
	// balance=250 (token 3)
}
