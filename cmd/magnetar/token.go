package main

import (
	"crypto/rsa"
	"encoding/base64"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/magnetar-dev/magnetar/dataplane/auth"
)

func init() { subcommands = append(subcommands, newTokenCommand) }

// newTokenCommand mints keys and tokens as `pulsar tokens` does.
func newTokenCommand() *cobra.Command {
	cmd := &cobra.Command{Use: "token", Short: "Create token-authentication keys and tokens (like `pulsar tokens`)"}

	var out string
	var b64 bool
	secret := &cobra.Command{
		Use: "create-secret-key", Short: "Create an HS256 secret key (raw bytes; --base64 prints it as text)", Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			k, err := auth.NewSecretKey()
			if err != nil {
				return err
			}
			if b64 {
				k = []byte(base64.StdEncoding.EncodeToString(k) + "\n")
			}
			return writeOut(out, k)
		},
	}
	secret.Flags().StringVarP(&out, "output", "o", "", "file to write (mode 0600; default stdout)")
	secret.Flags().BoolVar(&b64, "base64", false, "write base64 text instead of raw bytes")

	var privOut, pubOut, alg string
	pair := &cobra.Command{
		Use: "create-key-pair", Short: "Create a private/public key pair (PKCS#8 and X.509 DER)", Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			if privOut == "" || pubOut == "" {
				return errors.New("--output-private-key and --output-public-key are required")
			}
			priv, pub, err := auth.NewKeyPair(alg)
			if err != nil {
				return err
			}
			if err := writeOut(privOut, priv); err != nil {
				return err
			}
			return os.WriteFile(pubOut, pub, 0o644)
		},
	}
	pair.Flags().StringVar(&privOut, "output-private-key", "", "private key file")
	pair.Flags().StringVar(&pubOut, "output-public-key", "", "public key file")
	pair.Flags().StringVarP(&alg, "signature-algorithm", "a", "RS256", "RS256 or ES256")

	var secretKey, privateKey, subject, audience, claim string
	var expiry time.Duration
	create := &cobra.Command{
		Use: "create", Short: "Sign a token for a role", Args: cobra.NoArgs,
		RunE: func(*cobra.Command, []string) error {
			var key any
			switch {
			case secretKey != "" && privateKey != "":
				return errors.New("give --secret-key or --private-key, not both")
			case secretKey != "":
				k, err := auth.ReadSecretKey(strings.TrimPrefix(secretKey, "file://"))
				if err != nil {
					return err
				}
				key = k
			case privateKey != "":
				k, err := auth.ReadPrivateKey(strings.TrimPrefix(privateKey, "file://"))
				if err != nil {
					return err
				}
				if r, ok := k.(*rsa.PrivateKey); ok {
					key = r
				} else {
					key = k
				}
			default:
				return errors.New("--secret-key or --private-key is required")
			}
			tok, err := auth.Mint(key, auth.MintOptions{Subject: subject, Audience: audience, Expiry: expiry, RoleClaim: claim})
			if err != nil {
				return err
			}
			fmt.Println(tok)
			return nil
		},
	}
	cf := create.Flags()
	cf.StringVar(&secretKey, "secret-key", "", "HS256 secret key file")
	cf.StringVar(&privateKey, "private-key", "", "RSA or EC private key file")
	cf.StringVarP(&subject, "subject", "s", "", "the role the token names (required)")
	cf.StringVar(&audience, "audience", "", "aud claim")
	cf.StringVar(&claim, "claim", "sub", "claim holding the role")
	cf.DurationVar(&expiry, "expiry", 0, "lifetime, e.g. 1h (default: never expires)")
	_ = create.MarkFlagRequired("subject")

	cmd.AddCommand(secret, pair, create)
	return cmd
}

func writeOut(path string, b []byte) error {
	if path == "" {
		_, err := os.Stdout.Write(b)
		return err
	}
	return os.WriteFile(path, b, 0o600)
}
