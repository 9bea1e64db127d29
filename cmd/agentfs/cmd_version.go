package main

import (
	"context"
	"fmt"
)

func init() {
	register(&command{
		name:    "version",
		summary: "print the version",
		usage:   "",
		help:    "Version prints the agentfs version.\n\nExample:\n  agentfs version",
		run: func(ctx context.Context, args []string) error {
			fmt.Println("agentfs", version)
			return nil
		},
	})
}
