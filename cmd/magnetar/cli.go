package main

import "github.com/magnetar-dev/magnetar/controlplane/cli"

// The control-plane CLI: org, region, serviceaccount, apikey, rolebinding,
// cluster, tenant, namespace, topic and operation.
func init() { subcommands = append(subcommands, cli.Constructors()...) }
