package mergequeue

// BounceKey is bounceKey, for the tests of package mergequeue_test.
var BounceKey = bounceKey
