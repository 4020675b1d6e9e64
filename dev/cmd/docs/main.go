// Command docs regenerates docs/configuration.md from the configuration
// structs (go tool task docs); run from the repository root.
package main

import (
	"flag"
	"fmt"
	"os"

	"github.com/fanout/fanout/dev/docs"
)

func main() {
	root := flag.String("root", ".", "the repository root")
	flag.Parse()
	if err := docs.WriteConfiguration(*root); err != nil {
		fmt.Fprintln(os.Stderr, "docs:", err)
		os.Exit(1)
	}
	fmt.Println("wrote", docs.ConfigurationPage)
}
