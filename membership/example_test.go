package membership_test

import (
	"fmt"
	"log"

	"github.com/leased/leased/membership"
)

func Example() {
	cfg := membership.TestConfig("grantor-1") // DefaultConfig in production
	cfg.Meta = map[string]string{"role": "grantor", "nats_url": "nats://127.0.0.1:4222"}
	a, err := membership.Start(cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer a.Shutdown()

	// A process that only wants to be seen: its own name and role.
	cfg = membership.TestConfig("worker-7")
	cfg.Meta = map[string]string{"role": "worker"}
	b, err := membership.Start(cfg)
	if err != nil {
		log.Fatal(err)
	}
	defer b.Shutdown()
	if _, err := b.Join([]string{a.Addr()}); err != nil {
		log.Fatal(err)
	}

	ev := <-a.Events()
	fmt.Println(ev.Type, ev.Member.Name, ev.Member.Meta["role"], ev.Member.State)

	// A graceful departure.
	if err := b.Leave(0); err != nil {
		log.Fatal(err)
	}
	for ev := range a.Events() {
		if ev.Type == membership.EventLeave || ev.Type == membership.EventDead {
			fmt.Println(ev.Type, ev.Member.Name, ev.Member.Suspicion == membership.MaxSuspicion)
			break
		}
	}
	// Output:
	// join worker-7 worker alive
	// leave worker-7 true
}
