package plan

// For the tests of package plan_test, which run opkit plan's command
// (package cli imports this one).
var (
	Compile     = compile
	Edited      = edited
	RunEngine   = runEngine
	Websites    = websites
	WebsiteFile = websiteFile
)
