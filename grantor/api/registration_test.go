package api_test

import (
	"testing"

	"github.com/leased/leased/grantor/api"
)

func TestRegistrationValidate(t *testing.T) {
	for _, r := range []api.Registration{
		{Service: "", Instance: "i", Addr: "a:1"},
		{Service: "web.x", Instance: "i", Addr: "a:1"},
		{Service: "web", Instance: "i.2", Addr: "a:1"},
		{Service: "web", Instance: "i 2", Addr: "a:1"},
		{Service: "web", Instance: "i", Addr: ""},
	} {
		if err := r.Validate(); err == nil {
			t.Errorf("%+v: accepted", r)
		}
	}
	if err := (api.Registration{Service: "web", Instance: "i-1", Addr: "a:1"}).Validate(); err != nil {
		t.Fatal(err)
	}
}
