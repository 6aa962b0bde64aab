package app

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"go.uber.org/zap"
)

// DevFile is where --dev writes its DevInfo, in the data directory.
const DevFile = "dev.json"

// startDev finishes --dev once the server listens: the simulator delivers
// its webhooks to this server, an admin token is created, and dev.json is
// written (mode 0600: it holds the token).
func (s *Server) startDev(ctx context.Context) error {
	s.sim.SetWebhook(s.URL()+"/webhooks/github", s.cfg.WebhookSecret)
	token, _, err := s.tokens.CreateToken(ctx, TokenSpec{Actor: "dev", Admin: true})
	if err != nil {
		return fmt.Errorf("dev token: %w", err)
	}
	earlier := readDevToken(filepath.Join(s.cfg.DataDir, DevFile))
	// The registry learns installation 1 from the simulator before the
	// first submission needs it.
	if err := s.installs.Resync(ctx); err != nil {
		return fmt.Errorf("dev: installations: %w", err)
	}
	s.dev = &DevInfo{Server: s.URL(), Token: token, GitHub: s.sim.URL(), WebhookSecret: s.cfg.WebhookSecret}
	b, err := json.MarshalIndent(s.dev, "", "  ")
	if err != nil {
		return err
	}
	// Through a new temporary file of mode 0600: os.WriteFile would keep
	// the mode of a file found under the temporary name.
	if err := writeSecretFile(filepath.Join(s.cfg.DataDir, DevFile), append(b, '\n')); err != nil {
		return fmt.Errorf("dev: %w", err)
	}
	// The admin token an earlier start printed is revoked once this one
	// is written: every start prints a new token, and the old ones would
	// otherwise stay valid, one more admin token a start.
	s.revokeEarlierDevToken(ctx, earlier)
	return nil
}

// checkDevDataDir keeps --dev and the real GitHub apart, before the
// database opens. A data directory is --dev's when it holds dev.json,
// and GitHub's when it holds a database without it: --dev on GitHub's
// would carry out its queued operations on the simulator (recording them
// succeeded, never to run on GitHub) and leave an admin token in it; a
// server for GitHub on a --dev directory would run the simulator's
// operations on GitHub and honour the admin token --dev printed. A new
// directory given --dev is marked before its database is made.
func checkDevDataDir(dir string, dev bool) error {
	exists := func(name string) (bool, error) {
		_, err := os.Stat(filepath.Join(dir, name))
		if errors.Is(err, fs.ErrNotExist) {
			return false, nil
		}
		return err == nil, err
	}
	hasDB, err := exists(DatabaseFile)
	if err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	marked, err := exists(DevFile)
	if err != nil {
		return fmt.Errorf("data directory: %w", err)
	}
	switch {
	case dev && !hasDB && !marked:
		if err := writeSecretFile(filepath.Join(dir, DevFile), []byte("{}\n")); err != nil {
			return fmt.Errorf("dev: %w", err)
		}
	case dev && hasDB && !marked:
		return fmt.Errorf("data directory %s holds a database that --dev did not make (it has no %s): --dev would carry out its operations on the simulator; give --dev a --data of its own", dir, DevFile)
	case !dev && marked:
		// Also without a database (removed to start afresh, or never made
		// by a --dev that stopped early): a server for GitHub would make
		// one beside dev.json, and be refused it at its next start.
		return fmt.Errorf("data directory %s is one of --dev (it has %s): its operations and tokens are the simulator's; give baton a --data of its own, or run it with --dev", dir, DevFile)
	}
	return nil
}

// readDevToken returns the token an earlier --dev start wrote to path,
// or "".
func readDevToken(path string) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	var d DevInfo
	if json.Unmarshal(b, &d) != nil {
		return ""
	}
	return d.Token
}

// revokeEarlierDevToken revokes token, the admin token of the "dev" actor
// an earlier --dev start printed, if it is still valid.
func (s *Server) revokeEarlierDevToken(ctx context.Context, token string) {
	if token == "" || token == s.dev.Token {
		return
	}
	p, err := s.tokens.Authenticate(ctx, token)
	if err != nil || p.Actor != "dev" || !p.Admin {
		return // revoked already, or not --dev's
	}
	if _, err := s.tokens.RevokeToken(ctx, p.TokenID); err != nil {
		s.log.Warn("the admin token of an earlier --dev start was not revoked",
			zap.String("event", "dev_token_revoke_failed"), zap.Int64("tokenId", p.TokenID), zap.Error(err))
	}
}
