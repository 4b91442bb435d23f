"""What a strategy plugin (this package) answers when its module says nothing."""
