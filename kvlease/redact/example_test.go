package redact_test

import (
	"fmt"

	"github.com/leased/leased/kvlease/redact"
)

// Claim is a caller's own type that carries a holder's secret.
type Claim struct {
	Name   string
	Secret string
}

// Format prints c as fmt would, with its secret redacted.
func (c Claim) Format(f fmt.State, verb rune) {
	type plain Claim // without this method
	p := plain(c)
	redact.Format(f, verb, &p, &p.Secret)
}

func ExampleFormat() {
	c := Claim{Name: "jobs.nightly", Secret: "s3cr3t"}
	fmt.Printf("%v\n%+v\n", c, c)
	// Output:
	// {jobs.nightly REDACTED}
	// {Name:jobs.nightly Secret:REDACTED}
}
