package ghsim

import "strconv"

// Demo names the repository SeedDemo creates.
const (
	DemoInstallationID int64 = 1
	DemoOwner                = "octo"
	DemoRepo                 = "demo"
)

// SeedDemo shapes the demo "GitHub" that `baton ghsim` and `baton serve
// --dev` start with: installation 1 of the App on the organisation octo,
// with repository octo/demo, whose main branch has one commit; open pull
// requests #1, #2 and #3 (heads pr-1…pr-3, each one commit ahead of main,
// mergeable); and open issues #10, #11 and #12. The pull requests' head
// SHAs are the same on every run (DemoHeadSHA).
func (s *Sim) SeedDemo() error {
	if _, err := s.AddRepo(DemoOwner, DemoRepo, DemoInstallationID); err != nil {
		return err
	}
	for n := 1; n <= 3; n++ {
		if _, err := s.AddPull(DemoOwner, DemoRepo, NewPull{
			Number: n, Title: "Demo change " + strconv.Itoa(n), HeadSHA: DemoHeadSHA(n),
			Body: "A pull request of the simulator's demo repository.",
		}); err != nil {
			return err
		}
	}
	for n := 10; n <= 12; n++ {
		if _, err := s.AddIssue(DemoOwner, DemoRepo, NewIssue{Number: n, Title: "Demo issue " + strconv.Itoa(n)}); err != nil {
			return err
		}
	}
	return nil
}

// DemoHeadSHA is the head SHA of demo pull request n.
func DemoHeadSHA(n int) string { return fakeSHA("octo/demo", "pull", strconv.Itoa(n)) }
