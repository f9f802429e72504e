package githubfake

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"time"
)

// ControlPath is where Options.Control serves the control API: the world
// set up and read over HTTP, for a fake that runs as a command
// (cmd/githubfake) rather than in a Go test. Each request's body and
// answer are JSON; a misuse (an unknown repository, a missing field) is
// 400 with {"message"}. It needs no token: the command listens on
// loopback.
//
//	POST {ControlPath}repos          {"repo"}: a repository with one commit on main; answers {"repo", "head"}
//	GET  {ControlPath}head?repo=     {"repo", "head"}
//	POST {ControlPath}pulls          {"repo", "author", "title", "commits", "merge"}: a pull request of commits (1 by default), merged with merge; answers it
//	POST {ControlPath}team-members   {"org", "team", "login"}: an active member of the team
//	POST {ControlPath}comments       {"repo", "number", "author", "body", "deliverTo", "secret"}: a comment, as someone
//	                                 commenting on github.com; with deliverTo, the issue_comment delivery GitHub sends
//	                                 is posted there, signed with secret; answers {"comment", "delivery": {"id", "status", "body"}}
//	GET  {ControlPath}comments?repo=&number=   the comments, oldest first
const ControlPath = "/_control/"

// refuser is the misuser of a Server of Serve: a misuse panics with a
// misuse, which the control API's request recovers and answers 400.
type refuser struct{}

type misuse struct{ message string }

func (m misuse) Error() string { return m.message }

func (refuser) Helper() {}

func (refuser) Fatalf(format string, args ...any) {
	panic(misuse{fmt.Sprintf(format, args...)})
}

// controlPull is a pull request as the control API answers it.
type controlPull struct {
	Repo           string    `json:"repo"`
	Number         int       `json:"number"`
	Title          string    `json:"title"`
	Author         string    `json:"author"`
	Branch         string    `json:"branch"`
	Commits        []string  `json:"commits"`
	Merged         bool      `json:"merged"`
	MergeCommitSHA string    `json:"mergeCommitSha,omitempty"`
	MergedAt       time.Time `json:"mergedAt,omitzero"`
}

type controlComment struct {
	ID        int64     `json:"id"`
	Repo      string    `json:"repo"`
	Number    int       `json:"number"`
	Author    string    `json:"author"`
	Body      string    `json:"body"`
	CreatedAt time.Time `json:"createdAt"`
}

func toControlComment(c Comment) controlComment {
	return controlComment{ID: c.ID, Repo: c.Repo, Number: c.Issue, Author: c.Author, Body: c.Body, CreatedAt: c.CreatedAt}
}

// control serves the control API.
func (s *Server) control(w http.ResponseWriter, r *http.Request) {
	defer func() {
		if v := recover(); v != nil {
			m, ok := v.(misuse)
			if !ok {
				panic(v)
			}
			writeError(w, http.StatusBadRequest, m.message)
		}
	}()
	var in struct {
		Repo      string `json:"repo"`
		Author    string `json:"author"`
		Title     string `json:"title"`
		Commits   int    `json:"commits"`
		Merge     bool   `json:"merge"`
		Org       string `json:"org"`
		Team      string `json:"team"`
		Login     string `json:"login"`
		Number    int    `json:"number"`
		Body      string `json:"body"`
		DeliverTo string `json:"deliverTo"`
		Secret    string `json:"secret"`
	}
	if r.Method == http.MethodPost {
		dec := json.NewDecoder(io.LimitReader(r.Body, 1<<20))
		dec.DisallowUnknownFields()
		if err := dec.Decode(&in); err != nil {
			writeError(w, http.StatusBadRequest, "the body is not the JSON this request takes: "+err.Error())
			return
		}
	} else {
		q := r.URL.Query()
		in.Repo = q.Get("repo")
		in.Number, _ = strconv.Atoi(q.Get("number"))
	}
	need := func(fields map[string]string) {
		for name, v := range fields {
			if v == "" {
				panic(misuse{"missing " + name})
			}
		}
	}
	switch r.Method + " " + r.URL.Path[len(ControlPath)-1:] {
	case "POST /repos":
		need(map[string]string{"repo": in.Repo})
		writeJSON(w, http.StatusCreated, map[string]string{"repo": in.Repo, "head": s.CreateRepo(in.Repo)})
	case "GET /head":
		need(map[string]string{"repo": in.Repo})
		writeJSON(w, http.StatusOK, map[string]string{"repo": in.Repo, "head": s.Head(in.Repo)})
	case "POST /pulls":
		need(map[string]string{"repo": in.Repo, "author": in.Author, "title": in.Title})
		pr := s.OpenPull(in.Repo, in.Author, in.Title, max(in.Commits, 1))
		if in.Merge {
			pr = s.Merge(in.Repo, pr.Number)
		}
		writeJSON(w, http.StatusCreated, controlPull(pr))
	case "POST /team-members":
		need(map[string]string{"org": in.Org, "team": in.Team, "login": in.Login})
		s.AddTeamMember(in.Org, in.Team, in.Login)
		writeJSON(w, http.StatusCreated, map[string]string{"org": in.Org, "team": in.Team, "login": in.Login})
	case "POST /comments":
		need(map[string]string{"repo": in.Repo, "author": in.Author, "body": in.Body})
		c := s.Comment(in.Repo, in.Number, in.Author, in.Body)
		out := map[string]any{"comment": toControlComment(c)}
		if in.DeliverTo != "" {
			ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
			defer cancel()
			resp, err := Delivery{Event: "issue_comment", Payload: s.IssueCommentEvent(c), Secret: in.Secret}.Send(ctx, in.DeliverTo)
			d := map[string]any{"id": resp.ID, "status": resp.Status, "body": resp.Body}
			if err != nil {
				d["error"] = err.Error()
			}
			out["delivery"] = d
		}
		writeJSON(w, http.StatusCreated, out)
	case "GET /comments":
		need(map[string]string{"repo": in.Repo})
		var out []controlComment
		for _, c := range s.Comments(in.Repo, in.Number) {
			out = append(out, toControlComment(c))
		}
		writeJSON(w, http.StatusOK, out)
	default:
		writeError(w, http.StatusNotFound, "Not Found: the control API has "+ControlPath+"repos, head, pulls, team-members and comments")
	}
}
