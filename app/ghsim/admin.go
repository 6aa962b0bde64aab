package ghsim

import (
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"net/http"
	"strconv"
	"time"
)

// adminRoutes is the admin API under /_ghsim/: it shapes "GitHub" for tests
// and scripts. It has no authentication; the simulator listens on loopback
// only and refuses admin requests from elsewhere.
func (s *Sim) adminRoutes() http.Handler {
	mux := http.NewServeMux()
	h := func(pattern string, f func(*http.Request) (int, any, error)) {
		mux.HandleFunc(pattern, func(w http.ResponseWriter, r *http.Request) {
			status, body, err := f(r)
			if err != nil {
				status = http.StatusInternalServerError
				switch {
				case errors.Is(err, ErrNotFound):
					status = http.StatusNotFound
				case errors.Is(err, ErrInvalid), errors.Is(err, errBadJSON):
					status = http.StatusUnprocessableEntity
				case errors.Is(err, ErrExists):
					status = http.StatusConflict
				}
				body = map[string]any{"error": err.Error()}
			}
			writeJSON(w, status, body)
		})
	}
	ok := func(v any, err error) (int, any, error) { return http.StatusOK, v, err }
	created := func(v any, err error) (int, any, error) { return http.StatusCreated, v, err }
	none := func(err error) (int, any, error) { return http.StatusNoContent, nil, err }
	repoOf := func(r *http.Request) (string, string) { return r.PathValue("owner"), r.PathValue("name") }
	num := func(r *http.Request, k string) int { n, _ := strconv.Atoi(r.PathValue(k)); return n }

	h("GET /_ghsim/app", func(r *http.Request) (int, any, error) {
		return ok(map[string]any{"url": s.URL(), "appId": s.AppID(), "webhookUrl": s.WebhookURL(), "webhookSecret": s.WebhookSecret()}, nil)
	})
	h("POST /_ghsim/seed", func(r *http.Request) (int, any, error) { return none(s.SeedDemo()) })

	// Installations and repositories.
	h("GET /_ghsim/installations", func(r *http.Request) (int, any, error) { return ok(s.Installations(), nil) })
	h("POST /_ghsim/installations", func(r *http.Request) (int, any, error) {
		var in struct {
			ID      int64  `json:"id"`
			Account string `json:"account"`
		}
		if err := decodeAdmin(r, &in); err != nil {
			return none(err)
		}
		return created(map[string]any{"id": in.ID}, s.AddInstallation(in.ID, in.Account))
	})
	h("DELETE /_ghsim/installations/{id}", func(r *http.Request) (int, any, error) {
		return none(s.DeleteInstallation(int64(num(r, "id"))))
	})
	h("POST /_ghsim/installations/{id}/suspend", func(r *http.Request) (int, any, error) {
		return none(s.SuspendInstallation(int64(num(r, "id")), true))
	})
	h("POST /_ghsim/installations/{id}/unsuspend", func(r *http.Request) (int, any, error) {
		return none(s.SuspendInstallation(int64(num(r, "id")), false))
	})
	h("GET /_ghsim/repos", func(r *http.Request) (int, any, error) { return ok(s.Repos(), nil) })
	h("POST /_ghsim/repos", func(r *http.Request) (int, any, error) {
		var in struct {
			Owner          string `json:"owner"`
			Name           string `json:"name"`
			InstallationID int64  `json:"installationId"`
		}
		if err := decodeAdmin(r, &in); err != nil {
			return none(err)
		}
		repo, added, err := s.addRepo(in.Owner, in.Name, in.InstallationID)
		switch {
		case err != nil:
			return none(err)
		case added == repoUnchanged:
			return none(fmt.Errorf("ghsim: repository %s/%s is in installation %d already: %w", in.Owner, in.Name, in.InstallationID, ErrExists))
		case added == repoMoved:
			return ok(repo, nil)
		}
		return created(repo, nil)
	})
	h("DELETE /_ghsim/repos/{owner}/{name}", func(r *http.Request) (int, any, error) {
		return none(s.RemoveRepo(repoOf(r)))
	})

	// Issues and pull requests.
	h("POST /_ghsim/repos/{owner}/{name}/issues", func(r *http.Request) (int, any, error) {
		var in NewIssue
		if err := decodeAdmin(r, &in); err != nil {
			return none(err)
		}
		o, n := repoOf(r)
		number, err := s.AddIssue(o, n, in)
		return created(map[string]any{"number": number}, err)
	})
	h("GET /_ghsim/repos/{owner}/{name}/issues/{n}", func(r *http.Request) (int, any, error) {
		o, n := repoOf(r)
		return ok(s.Issue(o, n, num(r, "n")))
	})
	h("POST /_ghsim/repos/{owner}/{name}/pulls", func(r *http.Request) (int, any, error) {
		var in NewPull
		if err := decodeAdmin(r, &in); err != nil {
			return none(err)
		}
		o, n := repoOf(r)
		number, err := s.AddPull(o, n, in)
		if err != nil {
			return none(err)
		}
		return created(s.Pull(o, n, number))
	})
	h("GET /_ghsim/repos/{owner}/{name}/pulls/{n}", func(r *http.Request) (int, any, error) {
		o, n := repoOf(r)
		return ok(s.Pull(o, n, num(r, "n")))
	})
	h("PATCH /_ghsim/repos/{owner}/{name}/pulls/{n}", func(r *http.Request) (int, any, error) {
		var in struct {
			Mergeable *bool  `json:"mergeable"`
			State     string `json:"state"`
			User      string `json:"user"`
		}
		if err := decodeAdmin(r, &in); err != nil {
			return none(err)
		}
		o, n := repoOf(r)
		pr := num(r, "n")
		if in.Mergeable != nil {
			if err := s.SetMergeable(o, n, pr, *in.Mergeable); err != nil {
				return none(err)
			}
		}
		switch in.State {
		case "":
		case "open", "closed":
			if err := s.ClosePull(o, n, pr, in.State == "closed", in.User); err != nil {
				return none(err)
			}
		default:
			return none(fmt.Errorf("state %q: %w", in.State, ErrInvalid))
		}
		return ok(s.Pull(o, n, pr))
	})
	h("POST /_ghsim/repos/{owner}/{name}/pulls/{n}/push", func(r *http.Request) (int, any, error) {
		var in struct {
			SHA  string `json:"sha"`
			User string `json:"user"`
		}
		if err := decodeAdmin(r, &in); err != nil {
			return none(err)
		}
		o, n := repoOf(r)
		sha, err := s.PushPull(o, n, num(r, "n"), in.SHA, in.User)
		return created(map[string]any{"sha": sha}, err)
	})
	h("POST /_ghsim/repos/{owner}/{name}/issues/{n}/labels", func(r *http.Request) (int, any, error) {
		var in struct {
			Labels []string `json:"labels"`
			User   string   `json:"user"`
		}
		if err := decodeAdmin(r, &in); err != nil {
			return none(err)
		}
		o, n := repoOf(r)
		for _, l := range in.Labels {
			if err := s.AddLabel(o, n, num(r, "n"), l, in.User); err != nil {
				return none(err)
			}
		}
		return ok(s.Issue(o, n, num(r, "n")))
	})
	h("DELETE /_ghsim/repos/{owner}/{name}/issues/{n}/labels/{label}", func(r *http.Request) (int, any, error) {
		o, n := repoOf(r)
		return none(s.RemoveLabel(o, n, num(r, "n"), r.PathValue("label"), r.URL.Query().Get("user")))
	})
	h("POST /_ghsim/repos/{owner}/{name}/issues/{n}/comments", func(r *http.Request) (int, any, error) {
		var in struct {
			Body string `json:"body"`
			User string `json:"user"`
		}
		if err := decodeAdmin(r, &in); err != nil {
			return none(err)
		}
		o, n := repoOf(r)
		id, err := s.AddComment(o, n, num(r, "n"), in.Body, in.User)
		return created(map[string]any{"id": id}, err)
	})

	// Commits, refs, statuses, checks, protection, collaborators.
	h("POST /_ghsim/repos/{owner}/{name}/commits", func(r *http.Request) (int, any, error) {
		var in Commit
		if err := decodeAdmin(r, &in); err != nil {
			return none(err)
		}
		o, n := repoOf(r)
		sha, err := s.AddCommit(o, n, in)
		return created(map[string]any{"sha": sha}, err)
	})
	h("GET /_ghsim/repos/{owner}/{name}/commits/{sha}", func(r *http.Request) (int, any, error) {
		o, n := repoOf(r)
		return ok(s.GetCommit(o, n, r.PathValue("sha")))
	})
	h("GET /_ghsim/repos/{owner}/{name}/refs", func(r *http.Request) (int, any, error) {
		o, n := repoOf(r)
		return ok(s.Refs(o, n))
	})
	h("GET /_ghsim/repos/{owner}/{name}/refs/{ref...}", func(r *http.Request) (int, any, error) {
		o, n := repoOf(r)
		sha, err := s.Ref(o, n, r.PathValue("ref"))
		return ok(map[string]any{"ref": r.PathValue("ref"), "sha": sha}, err)
	})
	h("PUT /_ghsim/repos/{owner}/{name}/refs/{ref...}", func(r *http.Request) (int, any, error) {
		var in struct {
			SHA  string `json:"sha"`
			User string `json:"user"`
		}
		if err := decodeAdmin(r, &in); err != nil {
			return none(err)
		}
		o, n := repoOf(r)
		return ok(map[string]any{"ref": r.PathValue("ref"), "sha": in.SHA}, s.SetRef(o, n, r.PathValue("ref"), in.SHA, in.User))
	})
	h("POST /_ghsim/repos/{owner}/{name}/statuses/{sha}", func(r *http.Request) (int, any, error) {
		var in NewStatus
		if err := decodeAdmin(r, &in); err != nil {
			return none(err)
		}
		o, n := repoOf(r)
		return created(nil, s.SetStatus(o, n, r.PathValue("sha"), in))
	})
	h("GET /_ghsim/repos/{owner}/{name}/statuses/{sha}", func(r *http.Request) (int, any, error) {
		o, n := repoOf(r)
		return ok(s.Statuses(o, n, r.PathValue("sha")))
	})
	h("POST /_ghsim/repos/{owner}/{name}/check-runs", func(r *http.Request) (int, any, error) {
		var in NewCheckRun
		if err := decodeAdmin(r, &in); err != nil {
			return none(err)
		}
		o, n := repoOf(r)
		id, err := s.AddCheckRun(o, n, in)
		return created(map[string]any{"id": id}, err)
	})
	h("POST /_ghsim/repos/{owner}/{name}/check-runs/{id}/complete", func(r *http.Request) (int, any, error) {
		var in struct {
			Conclusion string `json:"conclusion"`
		}
		if err := decodeAdmin(r, &in); err != nil {
			return none(err)
		}
		o, n := repoOf(r)
		return none(s.CompleteCheckRun(o, n, int64(num(r, "id")), in.Conclusion))
	})
	h("GET /_ghsim/repos/{owner}/{name}/commits/{sha}/check-runs", func(r *http.Request) (int, any, error) {
		o, n := repoOf(r)
		return ok(s.CheckRuns(o, n, r.PathValue("sha")))
	})
	h("PUT /_ghsim/repos/{owner}/{name}/branches/{branch}/protection", func(r *http.Request) (int, any, error) {
		var in struct {
			Contexts []string `json:"contexts"`
			Strict   bool     `json:"strict"`
		}
		if err := decodeAdmin(r, &in); err != nil {
			return none(err)
		}
		if in.Contexts == nil {
			in.Contexts = []string{}
		}
		o, n := repoOf(r)
		return none(s.SetRequiredChecks(o, n, r.PathValue("branch"), in.Contexts, in.Strict))
	})
	h("DELETE /_ghsim/repos/{owner}/{name}/branches/{branch}/protection", func(r *http.Request) (int, any, error) {
		o, n := repoOf(r)
		return none(s.SetRequiredChecks(o, n, r.PathValue("branch"), nil, false))
	})
	h("PUT /_ghsim/repos/{owner}/{name}/collaborators/{user}", func(r *http.Request) (int, any, error) {
		var in struct {
			Permission string `json:"permission"`
		}
		if err := decodeAdmin(r, &in); err != nil {
			return none(err)
		}
		o, n := repoOf(r)
		return none(s.SetPermission(o, n, r.PathValue("user"), in.Permission))
	})

	// Faults, rate limits, effects.
	h("GET /_ghsim/faults", func(r *http.Request) (int, any, error) { return ok(s.Faults(), nil) })
	h("POST /_ghsim/faults", func(r *http.Request) (int, any, error) {
		var in struct {
			Fault
			RetryAfterSeconds float64 `json:"retryAfterSeconds"`
			LatencyMillis     float64 `json:"latencyMs"`
		}
		if err := decodeAdmin(r, &in); err != nil {
			return none(err)
		}
		f := in.Fault
		f.RetryAfter = seconds(in.RetryAfterSeconds)
		f.Latency = time.Duration(in.LatencyMillis * float64(time.Millisecond))
		id, err := s.SetFault(f)
		return created(map[string]any{"id": id}, err)
	})
	h("DELETE /_ghsim/faults", func(r *http.Request) (int, any, error) { s.ClearFaults(); return none(nil) })
	h("DELETE /_ghsim/faults/{id}", func(r *http.Request) (int, any, error) {
		if !s.ClearFault(r.PathValue("id")) {
			return none(fmt.Errorf("fault %s: %w", r.PathValue("id"), ErrNotFound))
		}
		return none(nil)
	})
	h("GET /_ghsim/limits", func(r *http.Request) (int, any, error) { return ok(limitsWire(s.Limits()), nil) })
	h("PUT /_ghsim/limits", func(r *http.Request) (int, any, error) {
		var in struct {
			limitsJSON
			PrimaryLimit *int `json:"primaryLimit"` // to tell 0 from omitted
		}
		if err := decodeAdmin(r, &in); err != nil {
			return none(err)
		}
		if in.PrimaryLimit != nil {
			if *in.PrimaryLimit == 0 {
				return none(fmt.Errorf("ghsim: primaryLimit 0 would refuse every request; omit it for the default (5000), or give -1 for unlimited: %w", ErrInvalid))
			}
			in.limitsJSON.PrimaryLimit = *in.PrimaryLimit
		}
		l, err := in.limits()
		if err != nil {
			return none(err)
		}
		if err := s.SetLimits(l); err != nil {
			return none(err)
		}
		return ok(limitsWire(s.Limits()), nil)
	})
	h("POST /_ghsim/limits/reset", func(r *http.Request) (int, any, error) { s.ResetRateLimits(); return none(nil) })
	h("GET /_ghsim/effects", func(r *http.Request) (int, any, error) {
		since, _ := strconv.ParseInt(r.URL.Query().Get("since"), 10, 64)
		return ok(s.EffectsSince(since), nil)
	})

	// Webhooks.
	h("GET /_ghsim/webhook", func(r *http.Request) (int, any, error) {
		return ok(map[string]any{"url": s.WebhookURL(), "secret": s.WebhookSecret()}, nil)
	})
	h("PUT /_ghsim/webhook", func(r *http.Request) (int, any, error) {
		var in struct {
			URL    string `json:"url"`
			Secret string `json:"secret"`
		}
		if err := decodeAdmin(r, &in); err != nil {
			return none(err)
		}
		s.SetWebhook(in.URL, in.Secret)
		return none(nil)
	})
	h("PUT /_ghsim/webhook/fault", func(r *http.Request) (int, any, error) {
		var in WebhookFault
		if err := decodeAdmin(r, &in); err != nil {
			return none(err)
		}
		s.SetWebhookFault(in)
		return none(nil)
	})
	h("DELETE /_ghsim/webhook/fault", func(r *http.Request) (int, any, error) { s.ClearWebhookFault(); return none(nil) })
	h("GET /_ghsim/deliveries", func(r *http.Request) (int, any, error) { return ok(s.Deliveries(), nil) })
	h("POST /_ghsim/deliveries/{id}/redeliver", func(r *http.Request) (int, any, error) {
		id, _ := strconv.ParseInt(r.PathValue("id"), 10, 64)
		return none(s.Redeliver(id))
	})
	h("/_ghsim/", func(r *http.Request) (int, any, error) {
		return none(fmt.Errorf("%s %s: %w", r.Method, r.URL.Path, ErrNotFound))
	})
	return mux
}

var errBadJSON = errors.New("malformed JSON body")

func decodeAdmin(r *http.Request, v any) error {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return fmt.Errorf("read the body: %w", errBadJSON)
	}
	if len(body) == 0 {
		return nil
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("%v: %w", err, errBadJSON)
	}
	return nil
}

// limitsJSON is Limits on the wire: windows in seconds, and
// secondaryRetryAfter as "off", "auto" or a number of seconds.
type limitsJSON struct {
	PrimaryLimit           int     `json:"primaryLimit"`
	PrimaryWindowSeconds   float64 `json:"primaryWindowSeconds"`
	PrimaryStatus          int     `json:"primaryStatus"`
	SecondaryLimit         int     `json:"secondaryLimit"`
	SecondaryWindowSeconds float64 `json:"secondaryWindowSeconds"`
	SecondaryRetryAfter    any     `json:"secondaryRetryAfter"`
}

func limitsWire(l Limits) limitsJSON {
	out := limitsJSON{
		PrimaryLimit: l.PrimaryLimit, PrimaryWindowSeconds: l.PrimaryWindow.Seconds(), PrimaryStatus: l.PrimaryStatus,
		SecondaryLimit: l.SecondaryLimit, SecondaryWindowSeconds: l.SecondaryWindow.Seconds(), SecondaryRetryAfter: "off",
	}
	switch {
	case l.SecondaryRetryAfter == RetryAfterAuto:
		out.SecondaryRetryAfter = "auto"
	case l.SecondaryRetryAfter > 0:
		out.SecondaryRetryAfter = l.SecondaryRetryAfter.Seconds()
	}
	return out
}

func (in limitsJSON) limits() (Limits, error) {
	l := Limits{
		PrimaryLimit: in.PrimaryLimit, PrimaryWindow: seconds(in.PrimaryWindowSeconds), PrimaryStatus: in.PrimaryStatus,
		SecondaryLimit: in.SecondaryLimit, SecondaryWindow: seconds(in.SecondaryWindowSeconds),
	}
	ra, err := ParseRetryAfter(in.SecondaryRetryAfter)
	l.SecondaryRetryAfter = ra
	return l, err
}

// ParseRetryAfter reads a secondary-limit Retry-After setting: "off" (or
// nil, false, 0), "auto" (or "on", true), or a number of seconds (as a
// number or a string).
func ParseRetryAfter(v any) (time.Duration, error) {
	switch t := v.(type) {
	case nil:
		return 0, nil
	case bool:
		if t {
			return RetryAfterAuto, nil
		}
		return 0, nil
	case float64:
		if t < 0 || math.IsNaN(t) {
			return 0, fmt.Errorf("retry-after %v: %w", t, ErrInvalid)
		}
		return seconds(t), nil
	case string:
		switch t {
		case "", "off", "false", "no":
			return 0, nil
		case "auto", "on", "true", "yes":
			return RetryAfterAuto, nil
		}
		f, err := strconv.ParseFloat(t, 64)
		if err != nil {
			return 0, fmt.Errorf("retry-after %q: %w", t, ErrInvalid)
		}
		return ParseRetryAfter(f)
	}
	return 0, fmt.Errorf("retry-after %v: %w", v, ErrInvalid)
}

func seconds(f float64) time.Duration { return time.Duration(f * float64(time.Second)) }
