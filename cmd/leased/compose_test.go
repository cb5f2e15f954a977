package main_test

import (
	"encoding/json"
	"os"
	"regexp"
	"slices"
	"testing"

	"github.com/leased/leased/cmd/leased/cli"
)

// docker-compose.yml runs the same topology as `leased dev-cluster` and the
// cluster tests: each node's command must be exactly cli.ClusterServeArgs
// for a node named n<i> reachable as host n<i> on the standard ports.
func TestComposeMatchesDevCluster(t *testing.T) {
	data, err := os.ReadFile("../../docker-compose.yml")
	if err != nil {
		t.Fatal(err)
	}
	nodes := []cli.ClusterNode{
		{Name: "n1", Host: "n1", Port: 4222, ClusterPort: 6222, HTTPPort: 8080, Data: "/data"},
		{Name: "n2", Host: "n2", Port: 4222, ClusterPort: 6222, HTTPPort: 8080, Data: "/data"},
		{Name: "n3", Host: "n3", Port: 4222, ClusterPort: 6222, HTTPPort: 8080, Data: "/data"},
	}
	for i, n := range nodes {
		re := regexp.MustCompile(`(?m)^  ` + n.Name + `:\n(?:    .*\n)*?    command: (\[.*\])$`)
		m := re.FindSubmatch(data)
		if m == nil {
			t.Fatalf("docker-compose.yml: no command for service %s", n.Name)
		}
		var got []string
		if err := json.Unmarshal(m[1], &got); err != nil {
			t.Fatalf("%s command: %v", n.Name, err)
		}
		if want := cli.ClusterServeArgs(nodes, i); !slices.Equal(got, want) {
			t.Errorf("%s command in docker-compose.yml:\n got %q\nwant %q", n.Name, got, want)
		}
	}
	// leased exports traces over OTLP/HTTP (otlptracehttp), which Jaeger
	// takes on 4318; 4317 is its gRPC port, where they never arrived.
	if m := regexp.MustCompile(`OTEL_EXPORTER_OTLP_ENDPOINT: (\S+)`).FindSubmatch(data); m == nil || !regexp.MustCompile(`:4318$`).Match(m[1]) {
		t.Errorf("docker-compose.yml's OTEL_EXPORTER_OTLP_ENDPOINT %q: want Jaeger's OTLP/HTTP port 4318", m)
	}
	// Jaeger takes traces only: its OTLP receiver answers /v1/metrics 404
	// (all-in-one's only pipeline is traces), and every node logged a
	// "telemetry" warning at each metric export, once a minute.
	if !regexp.MustCompile(`(?m)^    OTEL_METRICS_EXPORTER: "?none"?\s*(#.*)?$`).Match(data) {
		t.Errorf("docker-compose.yml exports OTLP to Jaeger, which takes no metrics: want OTEL_METRICS_EXPORTER: none in the nodes' environment")
	}
	// dev-cluster's flags name the same things.
	local := cli.LocalCluster(3, "127.0.0.1", 4222, 6222, "/tmp/x")
	for i := range local {
		local[i].HTTPPort = 8080 + i // dev-cluster's --http-port
	}
	for i := range local {
		// Only containers, which listen on all interfaces, say --allow-insecure
		// and --allow-public-http.
		got := flagNames(cli.ClusterServeArgs(local, i))
		want := slices.DeleteFunc(flagNames(cli.ClusterServeArgs(nodes, i)), func(f string) bool {
			return f == "--allow-insecure" || f == "--allow-public-http"
		})
		if !slices.Equal(got, want) {
			t.Errorf("dev-cluster node %d flags %v, compose %v", i+1, got, want)
		}
	}
}

func flagNames(args []string) []string {
	var names []string
	for _, a := range args {
		if len(a) > 2 && a[:2] == "--" {
			names = append(names, a)
		}
	}
	return names
}
