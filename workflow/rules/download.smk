# download stage (placeholder)
