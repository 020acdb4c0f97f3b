DROP TABLE sign_in_audit;
