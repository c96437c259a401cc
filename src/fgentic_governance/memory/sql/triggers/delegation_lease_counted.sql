-- requires: functions/count_lease
DROP TRIGGER IF EXISTS delegation_lease_counted ON fgentic_memory.delegation_lease;
CREATE TRIGGER delegation_lease_counted AFTER INSERT ON fgentic_memory.delegation_lease
    FOR EACH ROW EXECUTE FUNCTION fgentic_memory.count_lease();
