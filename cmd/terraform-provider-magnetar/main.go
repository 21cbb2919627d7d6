// Command terraform-provider-magnetar is the Magnetar Terraform provider
// (package terraform), served to Terraform over its plugin protocol.
package main

import (
	"context"
	"flag"
	"log"

	"github.com/hashicorp/terraform-plugin-framework/providerserver"

	"github.com/magnetar-dev/magnetar/terraform"
)

// version is set by the release build (-ldflags "-X main.version=...").
var version = "dev"

func main() {
	debug := flag.Bool("debug", false, "run in debug mode, for debuggers such as delve (prints TF_REATTACH_PROVIDERS)")
	flag.Parse()
	err := providerserver.Serve(context.Background(), terraform.New(version), providerserver.ServeOpts{
		Address: terraform.Address,
		Debug:   *debug,
	})
	if err != nil {
		log.Fatal(err)
	}
}
