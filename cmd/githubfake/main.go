// Command githubfake serves a local GitHub (package githubfake) with its
// control API, so that an operator that calls GitHub, such as the deploy
// notifier (examples/deploy-notifier), is tried without GitHub and
// without writing Go:
//
//	go run ./cmd/githubfake -repo packit/packit-service
//
// It prints GITHUB_API_URL and GITHUB_TOKEN for the operator, and serves
// the control API under /_control/ (repositories, merged pull requests,
// team members, comments, and the signed issue_comment delivery a
// comment makes) until Ctrl-C. docs/examples/deploy-notifier.md walks
// through it.
package main

import (
	"context"
	"flag"
	"fmt"
	"net"
	"os"
	"os/signal"
	"syscall"

	"github.com/opkit-dev/opkit/internal/githubfake"
)

func main() {
	os.Exit(run(os.Args[1:]))
}

// repos is -repo, repeatable.
type repos []string

func (r *repos) String() string     { return fmt.Sprint(*r) }
func (r *repos) Set(v string) error { *r = append(*r, v); return nil }

func run(args []string) int {
	fs := flag.NewFlagSet("githubfake", flag.ContinueOnError)
	addr := fs.String("addr", "127.0.0.1:8787", "the address to listen on (loopback: the control API has no authentication)")
	token := fs.String("token", githubfake.DefaultToken, "the token every GitHub API request must carry")
	login := fs.String("login", githubfake.DefaultLogin, "the user the token authenticates as")
	var create repos
	fs.Var(&create, "repo", "a repository to create at start, OWNER/NAME; repeatable")
	if err := fs.Parse(args); err != nil {
		return 2
	}
	ln, err := net.Listen("tcp", *addr)
	if err != nil {
		fmt.Fprintf(os.Stderr, "githubfake: %v\n", err)
		return 1
	}
	s := githubfake.Serve(ln, githubfake.Options{Token: *token, Login: *login, Control: true})
	defer s.Close()
	for _, name := range create {
		head, err := createRepo(s, name)
		if err != nil {
			fmt.Fprintf(os.Stderr, "githubfake: -repo %s: %v\n", name, err)
			return 1
		}
		fmt.Printf("repository %s, main at %s\n", name, head)
	}
	fmt.Printf("GITHUB_API_URL=%s\nGITHUB_TOKEN=%s\ncontrol API: %s%s (docs/examples/deploy-notifier.md)\n", s.URL, *token, s.URL, githubfake.ControlPath)
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	<-ctx.Done()
	return 0
}

// createRepo creates a repository, a misuse (a bad name) an error.
func createRepo(s *githubfake.Server, name string) (head string, err error) {
	defer func() {
		if v := recover(); v != nil {
			err = fmt.Errorf("%v", v)
		}
	}()
	return s.CreateRepo(name), nil
}
