// Package browsertest drives the admin page in a real headless Chromium
// (Debian's chromium package, or $LATCHKEY_CHROMIUM) with chromedp: it is
// a module of its own so that chromedp never reaches the root module's
// users. The test skips, saying why, when no browser is found, and fails
// instead when LATCHKEY_REQUIRE_SERVERS=1 (make ci installs chromium).
//
// go test -run TestAdminPage -update-screenshot rewrites docs/admin.png,
// the screenshot the README shows.
package browsertest
