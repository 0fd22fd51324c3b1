package app

// PrecheckHits is how many transactions the app took from its prechecked
// cache instead of prechecking them again.
func PrecheckHits(a *App) int64 {
	a.checked.mu.Lock()
	defer a.checked.mu.Unlock()
	return a.checked.hits
}

// PrecheckPooled is how many transactions the app's block prechecks took
// from its mempool's admission instead of verifying them again.
func PrecheckPooled(a *App) int64 {
	a.checked.mu.Lock()
	defer a.checked.mu.Unlock()
	return a.checked.pooled
}
