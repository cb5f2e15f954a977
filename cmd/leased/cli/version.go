package cli

import (
	"fmt"
	"io"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/leased/leased/grantor"
	"github.com/leased/leased/grantor/api"
)

func newVersion(stdout io.Writer) *cobra.Command {
	return &cobra.Command{
		Use:   "version",
		Short: "Print the version of leased and of the NATS libraries it was built with",
		Args:  cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			// The version the service reports (nats micro info leased),
			// whatever the build.
			bi, ok := debug.ReadBuildInfo()
			if !ok {
				fmt.Fprintf(stdout, "leased %s\n", api.ServiceVersion)
				return nil
			}
			fmt.Fprintf(stdout, "leased %s (%s)\n", api.ServiceVersion, bi.GoVersion)
			if b := grantor.Build(); b != "" {
				fmt.Fprintf(stdout, "  build %s\n", b)
			}
			for _, d := range bi.Deps {
				switch d.Path {
				case "github.com/nats-io/nats-server/v2", "github.com/nats-io/nats.go":
					fmt.Fprintf(stdout, "  %s %s\n", d.Path, d.Version)
				}
			}
			return nil
		},
	}
}
