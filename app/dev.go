package app

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
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
	return nil
}
